package serve

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestAPIKey: with Config.APIKey every route but /health needs the key as
// a bearer token (unknown routes too, so that a stranger cannot map them),
// and refusals are 401s in the OpenAI error shape.
func TestAPIKey(t *testing.T) {
	const key = "sk-test-0123456789"
	_, ts := testServer(t, &fakeEngine{output: "hi"}, Config{APIKey: key})
	chat := `{"messages":[{"role":"user","content":"hi"}],"max_tokens":2}`
	cases := []struct {
		name, method, path, auth string
		want                     int
	}{
		{"health is open", "GET", "/health", "", 200},
		{"health is open with a wrong key", "GET", "/health", "Bearer nope", 200},
		{"models without a key", "GET", "/v1/models", "", 401},
		{"models with a wrong key", "GET", "/v1/models", "Bearer " + key + "x", 401},
		{"models with a prefix of the key", "GET", "/v1/models", "Bearer " + key[:5], 401},
		{"models with the key", "GET", "/v1/models", "Bearer " + key, 200},
		{"scheme is case-insensitive", "GET", "/v1/models", "bearer " + key, 200},
		{"basic auth is not a key", "GET", "/v1/models", "Basic " + key, 401},
		{"the bare key is not a bearer token", "GET", "/v1/models", key, 401},
		{"chat without a key", "POST", "/v1/chat/completions", "", 401},
		{"chat with the key", "POST", "/v1/chat/completions", "Bearer " + key, 200},
		{"completions without a key", "POST", "/v1/completions", "", 401},
		{"unknown route without a key", "GET", "/v1/embeddings", "", 401},
		{"unknown route with the key", "GET", "/v1/embeddings", "Bearer " + key, 404},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := http.NewRequest(c.method, ts.URL+c.path, strings.NewReader(chat))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Content-Type", "application/json")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != c.want {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.want, b)
			}
			if c.want == 401 {
				e := decodeError(t, b)
				if e.Error.Code == nil || *e.Error.Code != "invalid_api_key" || e.Error.Type != typeInvalidRequest {
					t.Errorf("401 body %s: want code invalid_api_key", b)
				}
				if strings.Contains(string(b), key) {
					t.Errorf("the 401 quotes the key: %s", b)
				}
				if resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			}
		})
	}
}

// TestNoAPIKey: without a key nothing asks for one.
func TestNoAPIKey(t *testing.T) {
	_, ts := testServer(t, &fakeEngine{}, Config{})
	resp, err := http.Get(ts.URL + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d without a configured key", resp.StatusCode)
	}
}

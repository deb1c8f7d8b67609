package eval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLoadItems(t *testing.T) {
	good := `{"id":"a-1","task":"add","messages":[{"role":"user","content":"1+1?"}],"answer":"2"}` + "\n\n" +
		`{"id":"m-1","task":"mcq","messages":[{"role":"user","content":"?"}],"answer":"B","choices":["1","2"]}` + "\n"
	cases := []struct {
		name, body, want string
	}{
		{"good", good, ""},
		{"bad json", "{\n", ":1:"},
		{"no id", `{"task":"t","messages":[{"role":"user","content":"x"}],"answer":"1"}`, "without an id"},
		{"no answer", `{"id":"x","task":"t","messages":[{"role":"user","content":"x"}]}`, "no answer"},
		{"no messages", `{"id":"x","task":"t","answer":"1"}`, "no messages"},
		{"no role", `{"id":"x","task":"t","messages":[{"content":"x"}],"answer":"1"}`, "no role"},
		{"letter out of range", `{"id":"x","task":"t","messages":[{"role":"user","content":"x"}],"answer":"E","choices":["1","2"]}`, "not a letter"},
		{"duplicate id", good + `{"id":"a-1","task":"add","messages":[{"role":"user","content":"x"}],"answer":"2"}`, "already used on line 1"},
		{"empty", "\n", "holds no items"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "e.jsonl")
			if err := os.WriteFile(path, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			items, err := LoadItems(path)
			if c.want == "" {
				if err != nil || len(items) != 2 || items[1].Choices[1] != "2" {
					t.Fatalf("items %+v, err %v", items, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	if _, err := LoadItems(filepath.Join(t.TempDir(), "missing.jsonl")); err == nil {
		t.Error("a missing file loaded")
	}
}

func TestLoadTaskInfo(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "heldout.jsonl")
	if m, err := LoadTaskInfo(path); err != nil || m != nil {
		t.Fatalf("without tasks.json: %v %v", m, err)
	}
	os.WriteFile(filepath.Join(dir, "tasks.json"), []byte(`{"tasks":[{"name":"mcq","chance":0.25}]}`), 0o644)
	if m, err := LoadTaskInfo(path); err != nil || m["mcq"].Chance != 0.25 {
		t.Fatalf("%v %v", m, err)
	}
	os.WriteFile(filepath.Join(dir, "tasks.json"), []byte(`{`), 0o644)
	if _, err := LoadTaskInfo(path); err == nil {
		t.Fatal("a corrupt tasks.json was accepted")
	}
}

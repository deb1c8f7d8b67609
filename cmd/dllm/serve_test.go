package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReadAPIKey(t *testing.T) {
	dir := t.TempDir()
	file := func(content string) string {
		p := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+content[:min(len(content), 3)])
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, key, file string
		want, err       string
	}{
		{"none", "", "", "", ""},
		{"flag", "k1", "", "k1", ""},
		{"file with newline", "", file("k2\n"), "k2", ""},
		{"file, first line only", "", file(" k3 \r\nsecond\n"), "k3", ""},
		{"both", "k1", file("k2"), "", "not both"},
		{"empty file", "", file("\n"), "", "first line is empty"},
		{"missing file", "", filepath.Join(dir, "nope"), "", "no such file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := readAPIKey(c.key, c.file)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want %q", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v3"
)

// runData runs `dllm data args...` from the repository root (the example
// config's paths are relative to it) and returns its standard output.
func runData(t *testing.T, args ...string) (string, error) {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chdir("../.."); err != nil {
		t.Fatal(err)
	}
	defer os.Chdir(wd)
	var out, errOut bytes.Buffer
	app := &cli.Command{Name: "dllm", Writer: &out, ErrWriter: &errOut, Commands: []*cli.Command{dataCommand()}}
	err = app.Run(context.Background(), append([]string{"dllm", "data"}, args...))
	return out.String(), err
}

func TestDataCommand(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "shards")
	got, err := runData(t, "prepare", "--config", "configs/data/example.yaml", "--out", out, "--workers", "2", "--seq-len", "128")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{out + ": ", "sequences x 128 tokens", "web", "chat", "max_tokens", "skipped: "} {
		if !strings.Contains(got, want) {
			t.Errorf("prepare output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "map[") {
		t.Errorf("prepare output shows a Go map:\n%s", got)
	}
	shard := filepath.Join(out, "shard-00000.bin")
	cases := []struct {
		name string
		args []string
		want []string
	}{
		{"decoded", []string{"inspect", shard, "--n", "2"}, []string{"32 sequences x 128 tokens", ": ok", "matches file: true", "── sequence 1", "⟪doc⟫", "⟦"}},
		{"ids", []string{"inspect", shard, "--n", "1", "--ids"}, []string{"── sequence 0", "⟦"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := runData(t, c.args...)
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range c.want {
				if !strings.Contains(got, want) {
					t.Errorf("output lacks %q:\n%s", want, got)
				}
			}
			if strings.Contains(got, "── sequence 2") {
				t.Errorf("--n not honoured")
			}
		})
	}
	// A rerun verifies and changes nothing; flags override the file.
	if _, err := runData(t, "prepare", "--config", "configs/data/example.yaml", "--out", out, "--seq-len", "128"); err != nil {
		t.Fatalf("rerun: %v", err)
	}
	if _, err := runData(t, "prepare", "--config", "configs/data/example.yaml", "--out", out); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("changed seq_len into the same directory: %v", err)
	}

	// A corrupt shard still shows, with the damage reported.
	data, err := os.ReadFile(shard)
	if err != nil {
		t.Fatal(err)
	}
	data[200] ^= 0xff
	if err := os.WriteFile(shard, data, 0o644); err != nil {
		t.Fatal(err)
	}
	got, err = runData(t, "inspect", shard, "--n", "1")
	if err == nil || !strings.Contains(err.Error(), "checksum mismatch") || !strings.Contains(got, "MISMATCH") {
		t.Errorf("corrupt shard: err %v\n%s", err, got)
	}
}

func TestDataCommandErrors(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("tokenizer: x\nseq_lenn: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"unknown key", []string{"prepare", "--config", bad}, "field seq_lenn not found"},
		{"no config", []string{"prepare"}, "config"},
		{"no shard", []string{"inspect"}, "one SHARD"},
		{"not a shard", []string{"inspect", "configs/data/example.yaml"}, "not a dllm shard"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := runData(t, c.args...)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

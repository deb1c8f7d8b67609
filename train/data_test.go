package train

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"dllm/data"
)

// prepareData writes a data directory of five shards of 4 sequences; stop,
// when set, stops the run after that shard as an interruption would.
func prepareData(t *testing.T, out string, stop int) {
	t.Helper()
	corpus := filepath.Join(t.TempDir(), "c.jsonl")
	var b strings.Builder
	for i := 0; i < 80; i++ {
		fmt.Fprintf(&b, `{"text": "The %d cats sat on %d mats and one of them said hello to the others."}`+"\n", i, i+1)
	}
	if err := os.WriteFile(corpus, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	dc := data.DefaultConfig()
	dc.Tokenizer, dc.Out, dc.SeqLen, dc.ShardTokens, dc.Workers, dc.TotalTokens = "../testdata/tiny-llama", out, 32, 32*4, 1, 32*20
	dc.Sources = []data.SourceConfig{{Name: "c", Kind: data.KindText, Paths: []string{corpus}}}
	opts := data.Options{Config: dc}
	if stop > 0 {
		opts.AfterShard = func(i int) error {
			if i == stop {
				return errors.New("interrupted")
			}
			return nil
		}
	}
	if _, err := data.Prepare(context.Background(), opts); (err != nil) != (stop > 0) {
		t.Fatalf("prepare: %v", err)
	}
}

// editManifest rewrites a field of dir's manifest.json.
func editManifest(t *testing.T, dir string, edit func(*data.Manifest)) {
	t.Helper()
	m, err := data.ReadManifest(dir)
	if err != nil {
		t.Fatal(err)
	}
	edit(m)
	b, err := jsonMarshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, data.ManifestFile), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDataIncomplete opens data directories in every incomplete state:
// each is refused with what is wrong and how to finish it, unless
// allowed, and then only the good shards are read, with a warning.
func TestDataIncomplete(t *testing.T) {
	shard := func(dir string, i int) string { return filepath.Join(dir, fmt.Sprintf("shard-%05d.bin", i)) }
	cases := []struct {
		name   string
		stop   int // interrupt prepare after this shard; 0: let it finish
		damage func(t *testing.T, dir string)
		want   string // in the refusal; "" for complete data
		seqs   int    // sequences read when allowed; 0: refused even then
	}{
		{name: "complete", seqs: 20},
		{name: "interrupted", stop: 2, want: "its preparation has not finished (manifest.json is not marked complete", seqs: 12},
		{name: "still running", damage: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *data.Manifest) { m.Complete = false })
		}, want: "not marked complete: the dllm data prepare run was interrupted, or is still going", seqs: 20},
		{name: "missing shard", damage: func(t *testing.T, dir string) {
			os.Remove(shard(dir, 1))
		}, want: "shard-00001.bin: missing", seqs: 16},
		{name: "truncated shard", damage: func(t *testing.T, dir string) {
			os.Truncate(shard(dir, 4), 100)
		}, want: "shard-00004.bin: 100 bytes, the manifest records", seqs: 16},
		{name: "damaged shard", damage: func(t *testing.T, dir string) {
			b, _ := os.ReadFile(shard(dir, 0))
			b[data.HeaderSize+5] ^= 1
			os.WriteFile(shard(dir, 0), b, 0o644)
		}, want: "shard-00000.bin: body checksum mismatch", seqs: 16},
		{name: "another run's shard", damage: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *data.Manifest) { m.Shards[3].CRC32C = "00000000" })
		}, want: "shard-00003.bin: does not match the manifest's record", seqs: 16},
		{name: "many missing shards", damage: func(t *testing.T, dir string) {
			for i := range 5 {
				os.Remove(shard(dir, i))
			}
			editManifest(t, dir, func(m *data.Manifest) { m.Complete = false })
		}, want: "shard-00003.bin: missing; 1 more, and no shard is usable"},
		{name: "nothing written yet", damage: func(t *testing.T, dir string) {
			editManifest(t, dir, func(m *data.Manifest) { m.Complete, m.Shards = false, nil })
		}, want: "and no shard is usable"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			prepareData(t, dir, c.stop)
			if c.damage != nil {
				c.damage(t, dir)
			}
			src, err := OpenData(dir, false, nil)
			if c.want == "" {
				if err != nil || src.Len() != c.seqs {
					t.Fatalf("complete data: %v", err)
				}
				src.Close()
				return
			}
			if err == nil {
				src.Close()
				t.Fatal("incomplete data opened")
			}
			for _, w := range []string{c.want, "data " + dir + " is incomplete", "Finish it by running the same dllm data prepare command again (same config, --out " + dir} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal lacks %q: %v", w, err)
				}
			}
			if c.seqs > 0 && !strings.Contains(err.Error(), "or pass --allow-incomplete-data (data.allow_incomplete: true)") {
				t.Errorf("refusal does not name the flag: %v", err)
			}
			var warned []string
			src, err = OpenData(dir, true, func(s string) { warned = append(warned, s) })
			if c.seqs == 0 {
				if err == nil || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("allowed, with nothing usable: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("allowed: %v", err)
			}
			defer src.Close()
			if src.Len() != c.seqs || len(warned) != 1 || !strings.Contains(warned[0], c.want) {
				t.Fatalf("allowed: %d sequences, want %d; warnings %q", src.Len(), c.seqs, warned)
			}
		})
	}
}

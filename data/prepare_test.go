package data

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// testConfig is a small run over the tiny tokenizer: 32-token sequences,
// 3 sequences per shard, <|endoftext|> (id 0) between documents.
func testConfig(out string, sources ...SourceConfig) Config {
	c := DefaultConfig()
	c.Tokenizer, c.Out = tinyDir, out
	c.SeqLen, c.ShardTokens = 32, 3*32
	c.Separator = "<|endoftext|>"
	c.Workers = 2
	c.Sources = sources
	return c
}

func prepare(t testing.TB, cfg Config, hook func(int) error) (*Manifest, error) {
	t.Helper()
	return Prepare(context.Background(), Options{Config: cfg, CreatedBy: "test", AfterShard: hook})
}

func mustPrepare(t testing.TB, cfg Config) *Manifest {
	t.Helper()
	m, err := prepare(t, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// concatSeqs concatenates the output's sequences.
func concatSeqs(seqs []seqData) (tokens []uint32, loss []bool, starts []int) {
	for i, s := range seqs {
		for _, st := range s.starts {
			starts = append(starts, i*len(s.tokens)+int(st))
		}
		tokens = append(tokens, s.tokens...)
		loss = append(loss, s.loss...)
	}
	return tokens, loss, starts
}

// TestPackText checks packing against documents tokenized independently:
// the output is exactly the documents back to back with one separator
// each, cut into sequences (a long document spans several), with every
// document start recorded and nothing padded; the tail that does not fill
// a sequence is counted as dropped.
func TestDataPackText(t *testing.T) {
	dir := t.TempDir()
	rows := textRows("plain", 30)
	rows[5]["text"] = strings.Repeat("a long document ", 40) // several sequences
	rows[9]["text"] = "   "                                  // skipped: empty
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), rows[:12])
	writeJSONL(t, filepath.Join(dir, "b.jsonl"), rows[12:])
	cfg := testConfig(filepath.Join(dir, "out"), SourceConfig{Name: "web", Kind: KindText, Paths: []string{filepath.Join(dir, "*.jsonl")}})
	m := mustPrepare(t, cfg)

	tok := tiny(t)
	var want []uint32
	var wantStarts []int
	for i, r := range rows {
		if i == 9 {
			continue
		}
		wantStarts = append(wantStarts, len(want))
		for _, id := range tok.Encode(r["text"].(string)) {
			want = append(want, uint32(id))
		}
		want = append(want, 0)
	}
	got, loss, starts := concatSeqs(readShards(t, cfg.Out))
	L := cfg.SeqLen
	if len(got)%L != 0 || len(got) != len(want)/L*L {
		t.Fatalf("wrote %d tokens; want the %d whole sequences of %d tokens", len(got), len(want)/L, len(want))
	}
	if !equalU32(got, want[:len(got)]) {
		t.Fatal("packed tokens differ from the documents back to back")
	}
	for _, on := range loss {
		if !on {
			t.Fatal("text tokens must all be targets")
		}
	}
	var inRange []int
	for _, s := range wantStarts {
		if s < len(got) {
			inRange = append(inRange, s)
		}
	}
	if !equalInts(starts, inRange) {
		t.Errorf("document starts %v, want %v", starts, inRange)
	}
	tt := m.Totals
	if tt.TakenTokens != int64(len(want)) || tt.DroppedTokens != int64(len(want)-len(got)) || tt.DroppedTokens >= int64(L) || tt.Tokens != uint64(len(got)) {
		t.Errorf("totals %+v: taken %d, written %d", tt, len(want), len(got))
	}
	st := m.Sources[0].Stats
	if st.Records != 30 || st.Documents != 29 || st.Skipped[skipEmpty] != 1 || st.Done != "exhausted" {
		t.Errorf("stats %+v", st)
	}
	if len(m.Shards) != (len(got)/L+2)/3 || !m.Complete {
		t.Errorf("%d shards for %d sequences, complete %v", len(m.Shards), len(got)/L, m.Complete)
	}
}

// TestPackChatAndMix mixes text and chat: chat documents keep their masks
// through packing, and the token shares follow the weights.
func TestDataPackChatAndMix(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "web.jsonl"), textRows("alpha", 50))
	writeParquet(t, filepath.Join(dir, "chat.parquet"), chatSchema, chatRows)
	cfg := testConfig(filepath.Join(dir, "out"),
		SourceConfig{Name: "web", Kind: KindText, Paths: []string{filepath.Join(dir, "web.jsonl")}, Weight: 3, Repeat: true},
		SourceConfig{Name: "chat", Kind: KindChat, Paths: []string{filepath.Join(dir, "chat.parquet")}, Weight: 1, Repeat: true},
	)
	cfg.TotalTokens = 200 * 32
	m := mustPrepare(t, cfg)
	if m.Totals.Sequences != 200 || m.Totals.Tokens != uint64(cfg.TotalTokens) {
		t.Fatalf("totals %+v, want exactly total_tokens", m.Totals)
	}
	for i, want := range []float64{0.75, 0.25} {
		if got := m.Sources[i].Share; got < want-0.02 || got > want+0.02 {
			t.Errorf("source %s share %.3f, want %.2f", m.Sources[i].Name, got, want)
		}
	}
	if m.Sources[1].Stats.Epochs < 2 {
		t.Errorf("the small chat source should repeat: %+v", m.Sources[1].Stats)
	}
	// Count the output's tokens per source from the text itself: chat
	// documents are the ones holding <|im_start|> (id 2).
	tokens, loss, starts := concatSeqs(readShards(t, cfg.Out))
	starts = append(starts, len(tokens))
	var chatTok, webTok, chatOn int
	for k := 0; k+1 < len(starts); k++ {
		d := tokens[starts[k]:starts[k+1]]
		isChat := false
		for _, id := range d {
			isChat = isChat || id == 2
		}
		if isChat {
			chatTok += len(d)
			for j := starts[k]; j < starts[k+1]; j++ {
				if loss[j] {
					chatOn++
				}
			}
			continue
		}
		webTok += len(d)
	}
	share := float64(chatTok) / float64(chatTok+webTok)
	if share < 0.2 || share > 0.3 {
		t.Errorf("chat share in the output %.3f, want about 0.25", share)
	}
	if chatOn == 0 || chatOn >= chatTok/2 {
		t.Errorf("chat loss-ON tokens %d of %d: want assistant tokens only", chatOn, chatTok)
	}
	if m.Totals.LossTokens != uint64(webTok+chatOn) {
		t.Errorf("manifest loss tokens %d, counted %d", m.Totals.LossTokens, webTok+chatOn)
	}
}

// TestPrepareDeterministic runs the same config with different worker
// counts: identical bytes. A different seed (with shuffling) differs.
func TestDataPrepareDeterministic(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 40))
	writeJSONL(t, filepath.Join(dir, "b.jsonl"), textRows("beta", 40))
	writeArrow(t, filepath.Join(dir, "c.arrow"), chatSchema, chatRows, false)
	config := func(out string, seed uint64, workers int) Config {
		c := testConfig(filepath.Join(dir, out),
			SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "*.jsonl")}, ShuffleFiles: true, ShuffleBuffer: 7, Weight: 2},
			SourceConfig{Name: "c", Kind: KindChat, Paths: []string{filepath.Join(dir, "c.arrow")}, Repeat: true, MaxTokens: 600},
		)
		c.Seed, c.Workers = seed, workers
		return c
	}
	mustPrepare(t, config("w1", 1, 1))
	mustPrepare(t, config("w4", 1, 4))
	mustPrepare(t, config("seed2", 2, 2))
	if diff := compareDirs(t, filepath.Join(dir, "w1"), filepath.Join(dir, "w4")); diff != "" {
		t.Errorf("same seed, different workers: %s", diff)
	}
	if compareDirs(t, filepath.Join(dir, "w1"), filepath.Join(dir, "seed2")) == "" {
		t.Error("a different seed gave the same output despite shuffling")
	}
	m, err := ReadManifest(filepath.Join(dir, "w1"))
	if err != nil {
		t.Fatal(err)
	}
	if c := m.Sources[1].Stats; c.Tokens > 600 || c.Done != "max_tokens" {
		t.Errorf("max_tokens not honoured: %+v", c)
	}
}

// TestResume interrupts runs after a shard and resumes them: the result is
// byte-for-byte the uninterrupted run's, wherever the interruption fell
// (documents and multi-document chats cross shard boundaries).
func TestDataResume(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 60))
	chats := append(append([]map[string]any{}, chatRows...), map[string]any{"id": 3, "messages": []map[string]any{
		{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "reasoning_content": "Greet."},
		{"role": "user", "content": "Bye"}, {"role": "assistant", "content": "See you", "reasoning_content": "Farewell."}}})
	writeJSONL(t, filepath.Join(dir, "c.jsonl"), chats)
	variants := []struct {
		name string
		edit func(*Config)
	}{
		{"until exhausted", func(*Config) {}},
		{"repeat shuffle total", func(c *Config) {
			c.Sources[1].Repeat, c.Sources[1].ShuffleBuffer, c.TotalTokens = true, 3, 40*32
		}},
	}
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			config := func(out string) Config {
				c := testConfig(filepath.Join(dir, v.name, out),
					SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "a.jsonl")}},
					SourceConfig{Name: "c", Kind: KindChat, Paths: []string{filepath.Join(dir, "c.jsonl")}, Weight: 0.5},
				)
				v.edit(&c)
				return c
			}
			ref := config("ref")
			m := mustPrepare(t, ref)
			if len(m.Shards) < 4 {
				t.Fatalf("only %d shards; the test needs more", len(m.Shards))
			}
			// Interruptions after the first shards, the last but one, and
			// the first shard that ends between the documents of one chat.
			stops := []int{0, 1, len(m.Shards) - 2}
			for i, s := range m.Shards {
				if s.Resume.Sources[1].NextDoc > 0 {
					stops = append(stops, i)
					break
				}
			}
			if len(stops) < 4 {
				t.Error("no shard ends between a chat's documents; the test should cover that")
			}
			for _, stopAfter := range stops {
				cfg := config(fmt.Sprint("stop", stopAfter))
				stop := errors.New("simulated kill")
				_, err := prepare(t, cfg, func(i int) error {
					if i == stopAfter {
						return stop
					}
					return nil
				})
				if !errors.Is(err, stop) {
					t.Fatalf("interrupted run: %v", err)
				}
				partial, err := ReadManifest(cfg.Out)
				if err != nil || partial.Complete || len(partial.Shards) != stopAfter+1 {
					t.Fatalf("manifest after the interruption: %v, %+v", err, partial)
				}
				mustPrepare(t, cfg)
				if diff := compareDirs(t, ref.Out, cfg.Out); diff != "" {
					t.Errorf("stopped after shard %d, resumed: %s", stopAfter, diff)
				}
			}
		})
	}
}

// TestCancel stops a run through its context mid-shard: the shard being
// written leaves no file, and a rerun completes it.
func TestDataCancel(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 60))
	src := SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "a.jsonl")}}
	ref := testConfig(filepath.Join(dir, "ref"), src)
	mustPrepare(t, ref)
	cfg := testConfig(filepath.Join(dir, "out"), src)
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Prepare(ctx, Options{Config: cfg, CreatedBy: "test", AfterShard: func(i int) error {
		if i == 1 {
			cancel()
		}
		return nil
	}})
	if err == nil || !strings.Contains(err.Error(), "interrupted after 2 committed shards") {
		t.Fatalf("cancelled run: %v", err)
	}
	if tmps, _ := filepath.Glob(filepath.Join(cfg.Out, "*"+tmpSuffix)); len(tmps) != 0 {
		t.Errorf("temporary files left: %v", tmps)
	}
	mustPrepare(t, cfg)
	if diff := compareDirs(t, ref.Out, cfg.Out); diff != "" {
		t.Errorf("resumed after cancel: %s", diff)
	}
}

// TestDataRemovesOnlyOwnTemps puts temporary-looking files in the output
// directory before a fresh run, a resumed run and a --force run: only the
// leftovers of an interrupted run of this tool go, a user's files stay.
func TestDataRemovesOnlyOwnTemps(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 60))
	src := SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "a.jsonl")}}
	files := []struct {
		name string
		kept bool
	}{
		{"notes.tmp", true},
		{"shard-00002.bin.tmp", true},
		{"manifest.json.tmp", true},
		{"draft.dllm-tmp", true},
		{"shard-2.bin" + tmpSuffix, true},
		{shardName(2) + tmpSuffix, false},
		{shardName(123456) + tmpSuffix, false},
		{ManifestFile + tmpSuffix, false},
	}
	// Each run starts from a directory in a given state, then the files
	// are put in and the run under test goes.
	runs := []struct {
		name  string
		setup func(cfg Config) error
		force bool
	}{
		{"fresh", func(Config) error { return nil }, false},
		{"resumed", func(cfg Config) error {
			_, err := prepare(t, cfg, func(i int) error {
				if i == 1 {
					return errors.New("stop")
				}
				return nil
			})
			if err == nil {
				return errors.New("the first run did not stop")
			}
			return nil
		}, false},
		{"finished", func(cfg Config) error { _, err := prepare(t, cfg, nil); return err }, false},
		{"force", func(cfg Config) error { _, err := prepare(t, cfg, nil); return err }, true},
	}
	for _, r := range runs {
		t.Run(r.name, func(t *testing.T) {
			cfg := testConfig(filepath.Join(dir, r.name), src)
			os.MkdirAll(cfg.Out, 0o755)
			if err := r.setup(cfg); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				writeFile(t, filepath.Join(cfg.Out, f.name), []byte("user data"))
			}
			if _, err := Prepare(context.Background(), Options{Config: cfg, Force: r.force}); err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				_, err := os.Stat(filepath.Join(cfg.Out, f.name))
				if kept := err == nil; kept != f.kept {
					t.Errorf("%s: kept %v, want %v", f.name, kept, f.kept)
				}
			}
		})
	}
}

// TestDataSkippedText checks how skip counts reach people: sorted
// "reason count" pairs, never a Go map.
func TestDataSkippedText(t *testing.T) {
	cases := []struct {
		skipped map[string]int64
		want    string
	}{
		{nil, "none"},
		{map[string]int64{skipEmpty: 560}, "empty 560"},
		{map[string]int64{skipTooLong: 3, skipEmpty: 560, skipChatError: 1}, "chat_error 1, empty 560, too_long 3"},
	}
	for _, c := range cases {
		if got := (SourceStats{Skipped: c.skipped}).SkippedText(); got != c.want {
			t.Errorf("%v: %q, want %q", c.skipped, got, c.want)
		}
	}
}

// A source that yields nothing, or loses most of its records to one
// cause, fails the run with the field it looked for, what it found and
// what to change; a few skipped records are only counted.
func TestDataYieldsSomething(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "text.jsonl"), textRows("alpha", 20))
	writeJSONL(t, filepath.Join(dir, "blank.jsonl"), []map[string]any{{"text": ""}, {"text": nil}, {"text": " "}, {"text": "fine words here"}})
	many := textRows("beta", 1200)
	writeJSONL(t, filepath.Join(dir, "many.jsonl"), many)
	few := textRows("gamma", 10)
	few[3]["text"] = ""
	writeJSONL(t, filepath.Join(dir, "few.jsonl"), few)
	text := SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "text.jsonl")}}
	for _, c := range []struct {
		name string
		src  SourceConfig
		want string
	}{
		{"chat over plain text", SourceConfig{Name: "b", Kind: KindChat, Paths: []string{filepath.Join(dir, "text.jsonl")}},
			`source "b" (kind chat, field "messages"): 20 of 20 records have no "messages" field (the first has: id, text); for plain text use kind: text`},
		{"a wrong field", SourceConfig{Name: "b", Kind: KindText, Field: "body", Paths: []string{filepath.Join(dir, "text.jsonl")}},
			`20 of 20 records have no "body" field (the first has: id, text); set field: to the key that holds the text`},
		{"mostly blank", SourceConfig{Name: "b", Kind: KindText, Paths: []string{filepath.Join(dir, "blank.jsonl")}},
			`3 of 4 records have an empty or null "text"`},
		{"stopped early", SourceConfig{Name: "b", Kind: KindChat, Paths: []string{filepath.Join(dir, "many.jsonl")}},
			`1000 of 1000 records have no "messages" field`},
		{"one blank of ten", SourceConfig{Name: "b", Kind: KindText, Paths: []string{filepath.Join(dir, "few.jsonl")}}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log strings.Builder
			man, err := Prepare(context.Background(), Options{Config: testConfig(filepath.Join(t.TempDir(), "out"), text, c.src), Log: &log})
			if c.want == "" {
				if err != nil || man.Sources[1].Stats.SkippedText() != "empty 1" {
					t.Errorf("%v; log:\n%s", err, log.String())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v\nwant %q", err, c.want)
			}
		})
	}
}

// TestResumeRepairsAndRefuses covers the output directory's other states.
func TestDataResumeRepairsAndRefuses(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 60))
	src := SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "a.jsonl")}}
	ref := testConfig(filepath.Join(dir, "ref"), src)
	mustPrepare(t, ref)

	cfg := testConfig(filepath.Join(dir, "out"), src)
	mustPrepare(t, cfg)
	// A finished run is verified and left alone.
	before := snapshotDir(t, cfg.Out)
	mustPrepare(t, cfg)
	if diff := compareSnap(before, snapshotDir(t, cfg.Out)); diff != "" {
		t.Errorf("rerun of a finished run changed it: %s", diff)
	}
	// A damaged shard and a stale temporary file: the run redoes the
	// damaged shard and everything after it.
	shards := shardFiles(t, cfg.Out)
	data, _ := os.ReadFile(shards[1])
	data[HeaderSize+3] ^= 1
	writeFile(t, shards[1], data)
	writeFile(t, shards[2]+tmpSuffix, []byte("partial"))
	mustPrepare(t, cfg)
	if diff := compareDirs(t, ref.Out, cfg.Out); diff != "" {
		t.Errorf("after repairing: %s", diff)
	}
	// A changed config is refused without --force, then replaces the run.
	changed := cfg
	changed.SeqLen = 16
	_, err := prepare(t, changed, nil)
	if err == nil || !strings.Contains(err.Error(), "--force") || !strings.Contains(err.Error(), "seq_len 32 -> 16") {
		t.Fatalf("changed config: %v", err)
	}
	if diff := compareDirs(t, ref.Out, cfg.Out); diff != "" {
		t.Errorf("a refused run changed the directory: %s", diff)
	}
	if _, err := Prepare(context.Background(), Options{Config: changed, Force: true}); err != nil {
		t.Fatal(err)
	}
	if m, _ := ReadManifest(cfg.Out); m.SeqLen != 16 {
		t.Error("--force did not replace the run")
	}
	// Changed input data is refused too.
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("changed", 60))
	if _, err := prepare(t, changed, nil); err == nil || !strings.Contains(err.Error(), `source "a" files`) {
		t.Fatalf("changed data: %v", err)
	}
	// Shards without a manifest are not overwritten silently.
	orphan := filepath.Join(dir, "orphan")
	os.MkdirAll(orphan, 0o755)
	writeFile(t, filepath.Join(orphan, shardName(0)), []byte("x"))
	if _, err := prepare(t, testConfig(orphan, src), nil); err == nil || !strings.Contains(err.Error(), "no manifest.json") {
		t.Fatalf("orphan shards: %v", err)
	}
}

func TestDataPrepareErrors(t *testing.T) {
	dir := t.TempDir()
	writeJSONL(t, filepath.Join(dir, "a.jsonl"), textRows("alpha", 3))
	writeFile(t, filepath.Join(dir, "bad.jsonl"), []byte("{\"text\": \"fine\"}\nnot json\n"))
	good := SourceConfig{Name: "a", Kind: KindText, Paths: []string{filepath.Join(dir, "a.jsonl")}}
	cases := []struct {
		name string
		edit func(*Config)
		want string
	}{
		{"missing file", func(c *Config) { c.Sources[0].Paths = []string{filepath.Join(dir, "none*.jsonl")} }, "matches no file"},
		{"bad line", func(c *Config) { c.Sources[0].Paths = []string{filepath.Join(dir, "bad.jsonl")} }, "bad.jsonl: line 2"},
		{"unknown separator", func(c *Config) { c.Separator = "<nope>" }, `separator "<nope>" is not a token`},
		{"bad tokenizer", func(c *Config) { c.Tokenizer = dir }, "tokenizer.json"},
		{"chat without template", func(c *Config) {
			c.Tokenizer = filepath.Join(tinyDir, "tokenizer.json")
			c.Sources[0].Kind = KindChat
		}, "chat sources need a chat template"},
		{"no eos", func(c *Config) {
			c.Tokenizer = filepath.Join(tinyDir, "tokenizer.json")
			c.Separator = ""
		}, "no eos_token; set separator"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := testConfig(filepath.Join(dir, "out-"+strings.ReplaceAll(c.name, " ", "-")), good)
			c.edit(&cfg)
			_, err := prepare(t, cfg, nil)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func equalU32(a, b []uint32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// snapshotDir reads every file of dir.
func snapshotDir(t testing.TB, dir string) map[string][]byte {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]byte{}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = data
	}
	return out
}

func compareSnap(a, b map[string][]byte) string {
	for name, da := range a {
		db, ok := b[name]
		if !ok {
			return name + " missing"
		}
		if !bytes.Equal(da, db) {
			return name + " differs"
		}
	}
	for name := range b {
		if _, ok := a[name]; !ok {
			return name + " is extra"
		}
	}
	return ""
}

// compareDirs compares two output directories file by file, bytes and
// all (the manifest included); "" when identical.
func compareDirs(t testing.TB, a, b string) string {
	t.Helper()
	return compareSnap(snapshotDir(t, a), snapshotDir(t, b))
}

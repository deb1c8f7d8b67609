package data

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"

	"golang.org/x/term"

	"dllm/tokenizer"
)

// Options configure Prepare beyond the Config.
type Options struct {
	Config Config
	// Force discards whatever the output directory holds (a run of another
	// config, or of this one) and starts over.
	Force bool
	// CreatedBy is recorded in the manifest ("dllm <version>").
	CreatedBy string
	// Log receives progress and messages; nil discards them. Terminal
	// draws a progress bar instead of periodic lines.
	Log      io.Writer
	Terminal bool
	// AfterShard, when set, runs after shard index is committed and
	// recorded; an error stops the run there, as an interruption would.
	AfterShard func(index int) error
}

// IsTerminal reports whether w is a terminal, for Options.Terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// shardName is the file name of shard i.
func shardName(i int) string { return fmt.Sprintf("shard-%05d.bin", i) }

// Prepare tokenizes, mixes and packs the configured sources into shards
// in cfg.Out and returns the final manifest. A directory holding an
// interrupted run of the same inputs is resumed after its last verified
// shard; one of a finished run is verified and left as it is.
func Prepare(ctx context.Context, opts Options) (*Manifest, error) {
	cfg := opts.Config
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	workers := cfg.Workers
	if workers == 0 {
		workers = runtime.NumCPU()
	}
	logf := func(format string, args ...any) {
		if opts.Log != nil {
			fmt.Fprintf(opts.Log, "data: "+format+"\n", args...)
		}
	}
	tinfo, enc, err := loadTokenizer(&cfg)
	if err != nil {
		return nil, err
	}
	files := make([][]FileInfo, len(cfg.Sources))
	var all []*FileInfo
	for i, src := range cfg.Sources {
		if files[i], err = expandPaths(src); err != nil {
			return nil, fmt.Errorf("data: %w", err)
		}
		for j := range files[i] {
			all = append(all, &files[i][j])
		}
	}
	logf("hashing %d source files", len(all))
	if err := hashFiles(all, workers); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	man := newManifest(&cfg, opts.CreatedBy, tinfo, files)
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		return nil, fmt.Errorf("data: %w", err)
	}
	old, kept, err := openOut(cfg.Out, man, opts.Force, logf)
	if err != nil {
		return nil, err
	}
	if old != nil {
		logf("%s is complete and verified (%d shards); nothing to do", cfg.Out, len(old.Shards))
		return old, nil
	}
	r := &run{cfg: &cfg, opts: &opts, man: man, logf: logf, workers: workers, enc: enc, files: files}
	return r.execute(ctx, kept)
}

// loadTokenizer loads the tokenizer, hashes its files and resolves the
// special tokens the run uses.
func loadTokenizer(cfg *Config) (TokenizerInfo, *encoder, error) {
	var info TokenizerInfo
	tok, err := tokenizer.Load(cfg.Tokenizer)
	if err != nil {
		return info, nil, fmt.Errorf("data: %w", err)
	}
	if info.Dir, err = filepath.Abs(cfg.Tokenizer); err != nil {
		return info, nil, err
	}
	tokFile, dir := info.Dir, ""
	if st, err := os.Stat(info.Dir); err == nil && st.IsDir() {
		dir, tokFile = info.Dir, filepath.Join(info.Dir, tokenizer.TokenizerFile)
	}
	if info.SHA256, err = sha256File(tokFile); err != nil {
		return info, nil, fmt.Errorf("data: %w", err)
	}
	if dir != "" {
		if info.ConfigSHA256, err = sha256File(filepath.Join(dir, tokenizer.TokenizerConfigFile)); err != nil {
			return info, nil, fmt.Errorf("data: %w", err)
		}
		if info.ChatTemplateSHA256, err = sha256File(filepath.Join(dir, tokenizer.ChatTemplateFile)); err != nil {
			return info, nil, fmt.Errorf("data: %w", err)
		}
	}
	info.VocabSize = tok.VocabSize()
	enc := &encoder{tok: tok, bos: -1}
	if cfg.Separator != "" {
		id, ok := tok.TokenID(cfg.Separator)
		if !ok {
			return info, nil, fmt.Errorf("data: separator %q is not a token of the vocabulary", cfg.Separator)
		}
		enc.sep, info.Separator = uint32(id), cfg.Separator
	} else {
		id, ok := tok.EOS()
		if !ok {
			return info, nil, errors.New("data: the tokenizer has no eos_token; set separator: in the config")
		}
		enc.sep = uint32(id)
		info.Separator, _ = tok.Token(id)
	}
	info.SeparatorID = enc.sep
	if tok.AddBOS() {
		if id, ok := tok.BOS(); ok {
			enc.bos = id
			info.BOSID = &id
		}
	}
	hasChat := false
	for _, s := range cfg.Sources {
		hasChat = hasChat || s.Kind == KindChat
	}
	if hasChat {
		if !tok.HasChatTemplate() {
			return info, nil, fmt.Errorf("data: chat sources need a chat template, and %s has none", cfg.Tokenizer)
		}
		eot := cfg.Chat.EndOfTurn
		if eot == "" {
			if _, ok := tok.TokenID("<|im_end|>"); ok {
				eot = "<|im_end|>"
			} else if id, ok := tok.EOS(); ok {
				eot, _ = tok.Token(id)
			}
		}
		info.EndOfTurn = eot
		enc.chat = &chatRenderer{tok: tok, thinking: cfg.Chat.EnableThinking, eot: eot, split: cfg.Chat.SplitTurns}
	}
	return info, enc, nil
}

func newManifest(cfg *Config, createdBy string, tinfo TokenizerInfo, files [][]FileInfo) *Manifest {
	m := &Manifest{
		Format:       ManifestFormat,
		Version:      ShardVersion,
		CreatedBy:    createdBy,
		SeqLen:       cfg.SeqLen,
		Seed:         cfg.Seed,
		SeqsPerShard: seqsPerShard(cfg),
		Tokenizer:    tinfo,
		Config:       *cfg,
		Shards:       []ShardInfo{},
	}
	var wsum float64
	for _, s := range cfg.Sources {
		wsum += s.Weight
	}
	for i, s := range cfg.Sources {
		m.Sources = append(m.Sources, SourceInfo{Name: s.Name, Kind: s.Kind, Weight: s.Weight, TargetShare: s.Weight / wsum, Files: files[i]})
	}
	m.Fingerprint = fingerprint(*cfg, tinfo, files)
	return m
}

func seqsPerShard(cfg *Config) int { return int(max(1, cfg.ShardTokens/int64(cfg.SeqLen))) }

// openOut decides what to do with the output directory. It returns the old
// manifest when that run is complete and verified (nothing to do), else
// the verified shards a run resumes after (none for a fresh start).
func openOut(out string, man *Manifest, force bool, logf func(string, ...any)) (*Manifest, []ShardInfo, error) {
	removeStaleTemps(out)
	existing, _ := filepath.Glob(filepath.Join(out, "shard-*.bin"))
	old, err := ReadManifest(out)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if len(existing) > 0 && !force {
			return nil, nil, fmt.Errorf("data: %s holds %d shard files but no %s; use --force to replace them or choose another --out", out, len(existing), ManifestFile)
		}
	case err != nil:
		if !force {
			return nil, nil, fmt.Errorf("data: %w; use --force to replace the directory's shards or choose another --out", err)
		}
	case old.Fingerprint != man.Fingerprint:
		if !force {
			return nil, nil, fmt.Errorf("data: %s holds shards of a different run (%s); use --force to replace them or choose another --out", out, describeChange(old, man))
		}
	case force:
	default:
		kept := verifiedPrefix(out, old.Shards, logf)
		if old.Complete && len(kept) == len(old.Shards) {
			return old, nil, nil
		}
		return nil, kept, nil
	}
	if force && (len(existing) > 0 || err == nil) {
		logf("--force: removing %d shards and the manifest of %s", len(existing), out)
		for _, f := range existing {
			if err := os.Remove(f); err != nil {
				return nil, nil, fmt.Errorf("data: %w", err)
			}
		}
		os.Remove(filepath.Join(out, ManifestFile))
	}
	return nil, nil, nil
}

// ownTemp matches the names of the temporary files Prepare writes: a shard
// or the manifest with tmpSuffix.
var ownTemp = regexp.MustCompile(`^(shard-[0-9]{5,}\.bin|` + regexp.QuoteMeta(ManifestFile) + `)` + regexp.QuoteMeta(tmpSuffix) + `$`)

// removeStaleTemps removes the temporary files a killed run left in out
// (one that returns removes its own): they are never valid. Files of other
// names, *.tmp included, are the user's and stay.
func removeStaleTemps(out string) {
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if e.Type().IsRegular() && ownTemp.MatchString(e.Name()) {
			os.Remove(filepath.Join(out, e.Name()))
		}
	}
}

// verifiedPrefix returns the recorded shards, in order, up to the first
// that is missing or does not match its record (size, counts, checksum).
func verifiedPrefix(out string, shards []ShardInfo, logf func(string, ...any)) []ShardInfo {
	for i, info := range shards {
		s, err := OpenRecordedShard(out, info)
		if err != nil {
			logf("%v: resuming from shard %d", err, i)
			return shards[:i]
		}
		s.Close()
	}
	return shards
}

// describeChange names what differs between two runs' inputs.
func describeChange(old, cur *Manifest) string {
	var diffs []string
	oc, nc := echoFields(old.Config), echoFields(cur.Config)
	keys := make([]string, 0, len(nc))
	for k := range nc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if k != "tokenizer" && k != "sources" && oc[k] != nc[k] {
			diffs = append(diffs, fmt.Sprintf("%s %s -> %s", k, oc[k], nc[k]))
		}
	}
	if oc["sources"] != nc["sources"] {
		diffs = append(diffs, "sources settings")
	}
	if old.Tokenizer.SHA256 != cur.Tokenizer.SHA256 || old.Tokenizer.ConfigSHA256 != cur.Tokenizer.ConfigSHA256 || old.Tokenizer.ChatTemplateSHA256 != cur.Tokenizer.ChatTemplateSHA256 {
		diffs = append(diffs, "tokenizer files")
	}
	if len(old.Sources) == len(cur.Sources) {
		for i := range cur.Sources {
			if !sameFiles(old.Sources[i].Files, cur.Sources[i].Files) {
				diffs = append(diffs, fmt.Sprintf("source %q files", cur.Sources[i].Name))
			}
		}
	}
	if len(diffs) == 0 {
		return "changed inputs"
	}
	return "changed: " + strings.Join(diffs, ", ")
}

func echoFields(c Config) map[string]string {
	data, _ := json.Marshal(c)
	var raw map[string]json.RawMessage
	json.Unmarshal(data, &raw)
	out := map[string]string{}
	for k, v := range raw {
		out[k] = string(v)
	}
	return out
}

func sameFiles(a, b []FileInfo) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].SHA256 != b[i].SHA256 || a[i].Format != b[i].Format {
			return false
		}
	}
	return true
}

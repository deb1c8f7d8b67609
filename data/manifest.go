package data

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ManifestFile is the manifest's name in the output directory.
const ManifestFile = "manifest.json"

// ManifestFormat names the manifest's format.
const ManifestFormat = "dllm-data"

// Manifest describes a prepared data directory: what went in (sources with
// file hashes, the tokenizer, the config), what came out (shards with
// checksums, token counts) and, per shard, the state a resumed run starts
// from. It is rewritten after every shard and finally with Complete set.
type Manifest struct {
	Format    string `json:"format"`
	Version   int    `json:"version"`
	CreatedBy string `json:"created_by"`
	// Complete is false while the run is in progress or was interrupted.
	Complete bool `json:"complete"`
	// Fingerprint is a sha256 over everything that determines the output
	// (settings, tokenizer files, source file contents and order); a run
	// resumes only into a directory with the same fingerprint.
	Fingerprint  string        `json:"fingerprint"`
	SeqLen       int           `json:"seq_len"`
	Seed         uint64        `json:"seed"`
	SeqsPerShard int           `json:"seqs_per_shard"`
	Tokenizer    TokenizerInfo `json:"tokenizer"`
	Sources      []SourceInfo  `json:"sources"`
	Shards       []ShardInfo   `json:"shards"`
	Totals       Totals        `json:"totals"`
	// Config echoes the effective config (defaults filled in).
	Config Config `json:"config"`
}

// TokenizerInfo identifies the tokenizer and the special tokens used.
type TokenizerInfo struct {
	Dir                string `json:"dir"`
	SHA256             string `json:"sha256"` // tokenizer.json
	ConfigSHA256       string `json:"config_sha256,omitempty"`
	ChatTemplateSHA256 string `json:"chat_template_sha256,omitempty"`
	VocabSize          int    `json:"vocab_size"`
	Separator          string `json:"separator"`
	SeparatorID        uint32 `json:"separator_id"`
	EndOfTurn          string `json:"end_of_turn,omitempty"`
	BOSID              *int   `json:"bos_id,omitempty"`
}

// SourceInfo is one source's inputs and contribution.
type SourceInfo struct {
	Name        string      `json:"name"`
	Kind        string      `json:"kind"`
	Weight      float64     `json:"weight"`
	TargetShare float64     `json:"target_share"`
	Share       float64     `json:"share"` // of the tokens taken
	Files       []FileInfo  `json:"files"`
	Stats       SourceStats `json:"stats"`
}

// ShardInfo is one committed shard.
type ShardInfo struct {
	File         string      `json:"file"`
	NumSeqs      uint64      `json:"num_seqs"`
	NumDocStarts uint64      `json:"num_doc_starts"`
	LossTokens   uint64      `json:"loss_tokens"`
	Bytes        uint64      `json:"bytes"`
	CRC32C       string      `json:"crc32c"` // of the body, as in the header
	Resume       resumeState `json:"resume"`
}

// Totals sum up the output.
type Totals struct {
	Sequences  uint64 `json:"sequences"`
	Tokens     uint64 `json:"tokens"`
	LossTokens uint64 `json:"loss_tokens"`
	// TakenTokens were taken from the sources; DroppedTokens of them were
	// not written: the last, partial sequence (never padded) or, with
	// total_tokens, the rest of the document the run stopped in.
	TakenTokens   int64 `json:"taken_tokens"`
	DroppedTokens int64 `json:"dropped_tokens"`
}

// ReadManifest reads dir's manifest.json.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if err != nil {
		return nil, err
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, ManifestFile), err)
	}
	if m.Format != ManifestFormat {
		return nil, fmt.Errorf("%s: format %q, want %q", filepath.Join(dir, ManifestFile), m.Format, ManifestFormat)
	}
	return &m, nil
}

// OpenRecordedShard opens the shard that a manifest of dir records and
// checks it against the record: present, of the recorded size, valid, and
// with the recorded counts and checksum. Errors name the file.
func OpenRecordedShard(dir string, info ShardInfo) (*Shard, error) {
	path := filepath.Join(dir, info.File)
	st, err := os.Stat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: missing", info.File)
	case err != nil:
		return nil, err
	case uint64(st.Size()) != info.Bytes:
		return nil, fmt.Errorf("%s: %d bytes, the manifest records %d (truncated, or being written)", info.File, st.Size(), info.Bytes)
	}
	s, err := OpenShard(path) // its errors name the file and the damage
	if err != nil {
		return nil, err
	}
	h := s.Header
	if h.NumSeqs != info.NumSeqs || h.NumDocStarts != info.NumDocStarts || fmt.Sprintf("%08x", h.BodyCRC) != info.CRC32C {
		s.Close()
		return nil, fmt.Errorf("%s: does not match the manifest's record (counts or checksum differ)", info.File)
	}
	return s, nil
}

// writeManifest replaces dir's manifest atomically: a crash leaves the
// previous manifest or the new one, never a mix.
func writeManifest(dir string, m *Manifest) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m); err != nil {
		return err
	}
	path := filepath.Join(dir, ManifestFile)
	f, err := os.OpenFile(path+tmpSuffix, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b.Bytes())
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(path+tmpSuffix, path)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(path + tmpSuffix)
		return fmt.Errorf("write manifest: %w", err)
	}
	return nil
}

// fingerprintInput is what the fingerprint hashes: the settings (paths
// left out, since moving the data or running from another directory does
// not change the output) and the contents of every input.
type fingerprintInput struct {
	Version   int        `json:"version"`
	Config    Config     `json:"config"`
	Tokenizer [3]string  `json:"tokenizer"`
	Files     [][]string `json:"files"`
}

func fingerprint(cfg Config, tok TokenizerInfo, files [][]FileInfo) string {
	in := fingerprintInput{Version: ShardVersion, Config: cfg, Tokenizer: [3]string{tok.SHA256, tok.ConfigSHA256, tok.ChatTemplateSHA256}}
	in.Config.Tokenizer = ""
	in.Config.Sources = append([]SourceConfig(nil), cfg.Sources...)
	for i := range in.Config.Sources {
		in.Config.Sources[i].Paths = nil
	}
	for _, fs := range files {
		var hashes []string
		for _, f := range fs {
			hashes = append(hashes, f.SHA256+" "+f.Format)
		}
		in.Files = append(in.Files, hashes)
	}
	data, _ := json.Marshal(in) // plain values: cannot fail
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

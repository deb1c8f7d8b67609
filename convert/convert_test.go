package convert

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"dllm/diffusion"
	"dllm/model"
	"dllm/tokenizer"
)

// tinyLlama has 512 embedding rows and a tokenizer of 500 ids: the mask
// token goes to padded row 500.
const tinyLlama = "../testdata/tiny-llama"

// fixture describes a checkpoint written by writeFixture.
type fixture struct {
	vocab  int // embedding rows; 500 = no padding for tiny-llama's tokenizer
	dtype  model.DType
	tied   bool
	shards int // 1: model.safetensors; 2: embedding and lm_head alone in the first shard
}

// writeFixture writes a small Llama checkpoint with pseudo-random weights
// and tiny-llama's tokenizer (500 ids) to a new directory.
func writeFixture(t *testing.T, f fixture) string {
	t.Helper()
	dir := t.TempDir()
	cfgJSON := fmt.Sprintf(`{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 8,
  "intermediate_size": 16,
  "num_hidden_layers": 2,
  "num_attention_heads": 2,
  "num_key_value_heads": 1,
  "head_dim": 4,
  "vocab_size": %d,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000.0,
  "tie_word_embeddings": %v,
  "torch_dtype": %q,
  "bos_token_id": 0,
  "eos_token_id": 1
}
`, f.vocab, f.tied, torchDType(f.dtype))
	writeTestFile(t, filepath.Join(dir, "config.json"), cfgJSON)
	cfg, err := model.ParseConfig([]byte(cfgJSON))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var first, rest []model.TensorData
	for _, s := range model.ExpectedTensors(cfg) {
		n := int64(1)
		for _, d := range s.Shape {
			n *= d
		}
		data := make([]byte, n*int64(f.dtype.Size()))
		for i := int64(0); i < n; i++ {
			storeFloat(data[i*int64(f.dtype.Size()):], f.dtype, float32(rng.NormFloat64()))
		}
		td := model.TensorData{Name: s.Name, DType: f.dtype, Shape: s.Shape, Data: data}
		if f.shards == 2 && (s.Name == embedName || s.Name == headName) {
			first = append(first, td)
		} else {
			rest = append(rest, td)
		}
	}
	meta := map[string]string{"format": "pt"}
	if f.shards == 2 {
		names := []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"}
		weightMap := map[string]string{}
		for i, tensors := range [][]model.TensorData{first, rest} {
			if err := model.WriteSafetensors(filepath.Join(dir, names[i]), tensors, meta); err != nil {
				t.Fatal(err)
			}
			for _, td := range tensors {
				weightMap[td.Name] = names[i]
			}
		}
		idx, _ := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
		writeTestFile(t, filepath.Join(dir, model.IndexFileName), string(idx))
	} else if err := model.WriteSafetensors(filepath.Join(dir, model.SingleFileName), rest, meta); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{tokenizer.TokenizerFile, tokenizer.TokenizerConfigFile} {
		copyTestFile(t, filepath.Join(tinyLlama, name), filepath.Join(dir, name))
	}
	return dir
}

func writeTestFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func copyTestFile(t *testing.T, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// copyFixture copies tiny-llama so a test may break it.
func copyFixture(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	entries, err := os.ReadDir(tinyLlama)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyTestFile(t, filepath.Join(tinyLlama, e.Name()), filepath.Join(dir, e.Name()))
	}
	return dir
}

func testOptions(from, out string) Options {
	o := DefaultOptions()
	o.From, o.Out, o.CreatedBy = from, out, "dllm test"
	return o
}

// convertWith plans and executes, letting edit change the plan (hooks).
func convertWith(t *testing.T, ctx context.Context, o Options, edit func(*Plan)) (*Result, error) {
	t.Helper()
	p, err := NewPlan(o)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	if edit != nil {
		edit(p)
	}
	return p.Execute(ctx)
}

// loadOutput checks that a model directory loads the way its readers load
// it, and returns its parts.
func loadOutput(t *testing.T, dir string) (*model.Config, *model.Checkpoint, *diffusion.Settings, *tokenizer.Tokenizer) {
	t.Helper()
	cfg, err := model.LoadConfig(dir)
	if err != nil {
		t.Fatal(err)
	}
	c, err := model.OpenCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if err := model.CheckTensors(cfg, c.Shapes()); err != nil {
		t.Fatal(err)
	}
	s, err := diffusion.LoadSettings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(cfg.VocabSize); err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := tok.TokenID(s.MaskToken); !ok || id != s.MaskTokenID || !tok.IsSpecial(id) {
		t.Fatalf("tokenizer maps %s to %d (found %v, special %v), dllm.json says %d", s.MaskToken, id, ok, tok.IsSpecial(id), s.MaskTokenID)
	}
	return cfg, c, s, tok
}

// assertNoOutput checks that a failed conversion left neither the output
// nor its temporary directory.
func assertNoOutput(t *testing.T, out string) {
	t.Helper()
	if _, err := os.Stat(out); err == nil {
		t.Errorf("%s exists after a failed conversion", out)
	}
	assertNoLeftovers(t, out)
}

func assertNoLeftovers(t *testing.T, out string) {
	t.Helper()
	entries, _ := os.ReadDir(filepath.Dir(out))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), filepath.Base(out)+".") {
			t.Errorf("leftover %s", e.Name())
		}
	}
}

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// jsonWithout decodes a JSON object and drops some keys, to compare files
// whose other fields must be untouched.
func jsonWithout(t *testing.T, path string, drop ...string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range drop {
		delete(m, k)
	}
	return m
}

func TestConvertPaddedRowIsLinked(t *testing.T) {
	out := filepath.Join(t.TempDir(), "model")
	res, err := convertWith(t, context.Background(), testOptions(tinyLlama, out), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, s, tok := loadOutput(t, out)
	if s.MaskTokenID != 500 || s.MaskToken != "<|mask|>" || cfg.VocabSize != 512 {
		t.Fatalf("mask %s = %d, vocab %d; want <|mask|> = 500, vocab 512", s.MaskToken, s.MaskTokenID, cfg.VocabSize)
	}
	if tok.VocabSize() != 501 {
		t.Errorf("tokenizer defines %d ids, want 501", tok.VocabSize())
	}
	want := diffusion.Settings{
		FormatVersion: 1, MaskTokenID: 500, MaskToken: "<|mask|>", BlockSize: 32, Attention: "block", Shift: true,
		Source: diffusion.Source{Path: mustAbs(t, tinyLlama), SHA256: fileSHA256(t, filepath.Join(tinyLlama, model.SingleFileName)),
			Architecture: "LlamaForCausalLM"},
		WeightsSHA256: map[string]string{model.SingleFileName: fileSHA256(t, filepath.Join(tinyLlama, model.SingleFileName))},
		CreatedBy:     "dllm test", CreatedAt: s.CreatedAt, Generation: diffusion.Generation{Threshold: 0.9, MaxStepsPerBlock: 32, TopP: 1, Verify: true},
	}
	if !reflect.DeepEqual(*s, want) {
		t.Errorf("dllm.json:\n got %+v\nwant %+v", *s, want)
	}
	if res.Done[model.SingleFileName] != Link {
		t.Errorf("weights were %s, want link", res.Done[model.SingleFileName])
	}
	a, _ := os.Stat(filepath.Join(tinyLlama, model.SingleFileName))
	b, _ := os.Stat(filepath.Join(out, model.SingleFileName))
	if !os.SameFile(a, b) {
		t.Error("weights are not hard-linked")
	}
	for _, name := range []string{"config.json", "generation_config.json"} {
		if fileSHA256(t, filepath.Join(out, name)) != fileSHA256(t, filepath.Join(tinyLlama, name)) {
			t.Errorf("%s changed", name)
		}
	}
	if got, want := jsonWithout(t, filepath.Join(out, "tokenizer.json"), "added_tokens"),
		jsonWithout(t, filepath.Join(tinyLlama, "tokenizer.json"), "added_tokens"); !reflect.DeepEqual(got, want) {
		t.Error("tokenizer.json changed beyond added_tokens")
	}
	if got, want := jsonWithout(t, filepath.Join(out, "tokenizer_config.json"), "added_tokens_decoder", "mask_token"),
		jsonWithout(t, filepath.Join(tinyLlama, "tokenizer_config.json"), "added_tokens_decoder", "mask_token"); !reflect.DeepEqual(got, want) {
		t.Error("tokenizer_config.json changed beyond added_tokens_decoder and mask_token")
	}
	if m := jsonWithout(t, filepath.Join(out, "tokenizer_config.json"))["mask_token"]; m != "<|mask|>" {
		t.Errorf("tokenizer_config.json mask_token %v, want <|mask|> (transformers' mask_token_id)", m)
	}
	dec := jsonWithout(t, filepath.Join(out, "tokenizer_config.json"))["added_tokens_decoder"].(map[string]any)["500"]
	wantDec := map[string]any{"content": "<|mask|>", "lstrip": false, "normalized": false, "rstrip": false, "single_word": false, "special": true}
	if !reflect.DeepEqual(dec, wantDec) {
		t.Errorf("added_tokens_decoder[500] = %v, want %v", dec, wantDec)
	}
	assertNoLeftovers(t, out)
}

func mustAbs(t *testing.T, p string) string {
	t.Helper()
	abs, err := realPath(p)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestConvertGrowsWithoutPadding(t *testing.T) {
	tests := []struct {
		name string
		fix  fixture
		out  string // --dtype
	}{
		{"bf16", fixture{vocab: 500, dtype: model.BF16, shards: 1}, "auto"},
		{"f16", fixture{vocab: 500, dtype: model.F16, shards: 1}, "auto"},
		{"tied", fixture{vocab: 500, dtype: model.BF16, tied: true, shards: 1}, "auto"},
		{"bf16 to f32", fixture{vocab: 500, dtype: model.BF16, shards: 1}, "f32"},
		{"sharded", fixture{vocab: 500, dtype: model.F32, shards: 2}, "auto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := writeFixture(t, tt.fix)
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(from, out)
			o.DType = tt.out
			res, err := convertWith(t, context.Background(), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			cfg, c, s, _ := loadOutput(t, out)
			if s.MaskTokenID != 500 || cfg.VocabSize != 501 {
				t.Fatalf("mask id %d, vocab %d; want 500 and 501", s.MaskTokenID, cfg.VocabSize)
			}
			src, err := model.OpenCheckpoint(from)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			outDT, _ := parseDType(tt.out)
			for _, ti := range src.Tensors() {
				got, _ := c.Tensor(ti.Name)
				want := ti.DType
				if outDT != 0 {
					want = outDT
				}
				if got.DType != want {
					t.Errorf("%s is %v, want %v", ti.Name, got.DType, want)
				}
				grows := ti.Name == embedName || ti.Name == headName && !tt.fix.tied
				if grows != (got.Shape[0] == ti.Shape[0]+1) {
					t.Errorf("%s: shape %v from %v", ti.Name, got.Shape, ti.Shape)
				}
				checkValues(t, src, c, ti, got, grows)
			}
			// Only vocab_size may change in config.json, byte for byte.
			wantCfg, _ := os.ReadFile(filepath.Join(from, "config.json"))
			wantCfg = bytes.Replace(wantCfg, []byte(`"vocab_size": 500`), []byte(`"vocab_size": 501`), 1)
			if outDT == model.F32 {
				wantCfg = bytes.Replace(wantCfg, []byte(`"torch_dtype": "bfloat16"`), []byte(`"torch_dtype": "float32"`), 1)
			}
			if gotCfg, _ := os.ReadFile(filepath.Join(out, "config.json")); !bytes.Equal(gotCfg, wantCfg) {
				t.Errorf("config.json:\n%s\nwant\n%s", gotCfg, wantCfg)
			}
			if tt.fix.shards == 2 {
				if res.Done["model-00002-of-00002.safetensors"] != Link || res.Done["model-00001-of-00002.safetensors"] != Rewrite {
					t.Errorf("shards: %v; want the vocabulary shard rewritten, the other linked", res.Done)
				}
				var idx struct {
					Metadata struct {
						TotalSize int64 `json:"total_size"`
					} `json:"metadata"`
				}
				data, _ := os.ReadFile(filepath.Join(out, model.IndexFileName))
				if err := json.Unmarshal(data, &idx); err != nil {
					t.Fatal(err)
				}
				var total int64
				for _, ti := range c.Tensors() {
					total += ti.Size
				}
				if idx.Metadata.TotalSize != total {
					t.Errorf("index total_size %d, want %d", idx.Metadata.TotalSize, total)
				}
			}
		})
	}
}

// checkValues compares an output tensor with its source: every source row
// converted to the output dtype, and a grown tensor's last row the mean of
// the source rows.
func checkValues(t *testing.T, src, out *model.Checkpoint, in, got model.TensorInfo, grows bool) {
	t.Helper()
	a, _ := src.Bytes(in.Name)
	b, _ := out.Bytes(got.Name)
	n := len(a) / in.DType.Size()
	for i := 0; i < n; i++ {
		want := roundTo(got.DType, loadFloat(a[i*in.DType.Size():], in.DType))
		if g := loadFloat(b[i*got.DType.Size():], got.DType); g != want && !(math.IsNaN(float64(g)) && math.IsNaN(float64(want))) {
			t.Fatalf("%s[%d] = %v, want %v", in.Name, i, g, want)
		}
	}
	if !grows {
		return
	}
	rows, cols := int(in.Shape[0]), int(in.Shape[1])
	for col := 0; col < cols; col++ {
		var sum float64
		for r := 0; r < rows; r++ {
			sum += float64(loadFloat(a[(r*cols+col)*in.DType.Size():], in.DType))
		}
		want := roundTo(got.DType, float32(sum/float64(rows)))
		if g := loadFloat(b[(n+col)*got.DType.Size():], got.DType); g != want {
			t.Fatalf("%s mask row [%d] = %v, want mean %v", in.Name, col, g, want)
		}
	}
}

// roundTo rounds f to dt's precision.
func roundTo(dt model.DType, f float32) float32 {
	b := make([]byte, dt.Size())
	storeFloat(b, dt, f)
	return loadFloat(b, dt)
}

func TestConvertDType(t *testing.T) {
	tests := []struct {
		dtype string
		want  model.DType
		cfg   string
	}{
		{"bf16", model.BF16, `"dtype": "bfloat16"`},
		{"float16", model.F16, `"dtype": "float16"`},
		{"f32", model.F32, `"dtype": "float32"`}, // same as the source: linked
	}
	for _, tt := range tests {
		t.Run(tt.dtype, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(tinyLlama, out)
			o.DType = tt.dtype
			res, err := convertWith(t, context.Background(), o, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, c, s, _ := loadOutput(t, out)
			src, _ := model.OpenCheckpoint(tinyLlama)
			defer src.Close()
			for _, ti := range src.Tensors() {
				got, _ := c.Tensor(ti.Name)
				if got.DType != tt.want {
					t.Fatalf("%s is %v, want %v", ti.Name, got.DType, tt.want)
				}
				checkValues(t, src, c, ti, got, false)
			}
			wantAction := Rewrite
			if tt.want == model.F32 {
				wantAction = Link
			}
			if res.Done[model.SingleFileName] != wantAction {
				t.Errorf("weights %s, want %s", res.Done[model.SingleFileName], wantAction)
			}
			if cfg, _ := os.ReadFile(filepath.Join(out, "config.json")); !bytes.Contains(cfg, []byte(tt.cfg)) {
				t.Errorf("config.json lacks %s", tt.cfg)
			}
			// The source hash is of the source, whatever was written.
			if s.Source.SHA256 != fileSHA256(t, filepath.Join(tinyLlama, model.SingleFileName)) {
				t.Errorf("source sha256 %s is not the source's", s.Source.SHA256)
			}
		})
	}
}

func TestConvertExistingMaskToken(t *testing.T) {
	from := copyFixture(t)
	if err := tokenizer.AddSpecialToken(from, "<|mask|>", 505); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "model")
	res, err := convertWith(t, context.Background(), testOptions(from, out), nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _, s, _ := loadOutput(t, out)
	if s.MaskTokenID != 505 {
		t.Errorf("mask id %d, want the existing 505", s.MaskTokenID)
	}
	if name := tokenizer.TokenizerFile; res.Done[name] != Copy || fileSHA256(t, filepath.Join(out, name)) != fileSHA256(t, filepath.Join(from, name)) {
		t.Errorf("%s was %s, want an unchanged copy", name, res.Done[name])
	}
	// tokenizer_config.json gains only mask_token.
	cfg := jsonWithout(t, filepath.Join(out, tokenizer.TokenizerConfigFile), "mask_token")
	if !reflect.DeepEqual(cfg, jsonWithout(t, filepath.Join(from, tokenizer.TokenizerConfigFile), "mask_token")) ||
		jsonWithout(t, filepath.Join(out, tokenizer.TokenizerConfigFile))["mask_token"] != s.MaskToken {
		t.Errorf("tokenizer_config.json: want the source's with mask_token %q", s.MaskToken)
	}
}

func TestConvertCustomMaskToken(t *testing.T) {
	out := filepath.Join(t.TempDir(), "model")
	o := testOptions(tinyLlama, out)
	o.MaskToken = "<mask>"
	if _, err := convertWith(t, context.Background(), o, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, s, _ := loadOutput(t, out); s.MaskToken != "<mask>" || s.MaskTokenID != 500 {
		t.Errorf("mask %s = %d, want <mask> = 500", s.MaskToken, s.MaskTokenID)
	}
}

func TestConvertCopyFallbackAndHashes(t *testing.T) {
	tests := []struct {
		name string
		hash string
	}{{"full", HashFull}, {"fast", HashFast}}
	wantSHA := fileSHA256(t, filepath.Join(tinyLlama, model.SingleFileName))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(tinyLlama, out)
			o.Hash = tt.hash
			var log bytes.Buffer
			o.Log = &log
			res, err := convertWith(t, context.Background(), o, func(p *Plan) {
				p.place = func(string, string) (Action, error) { return "", syscall.EXDEV }
			})
			if err != nil {
				t.Fatal(err)
			}
			_, _, s, _ := loadOutput(t, out)
			if res.Done[model.SingleFileName] != Copy {
				t.Errorf("weights %s, want copy", res.Done[model.SingleFileName])
			}
			if fileSHA256(t, filepath.Join(out, model.SingleFileName)) != wantSHA {
				t.Error("copied weights differ")
			}
			switch tt.hash {
			case HashFull:
				if s.Source.SHA256 != wantSHA || s.Source.Fingerprint != "" {
					t.Errorf("source %+v, want sha256 %s", s.Source, wantSHA)
				}
			case HashFast:
				fp, err := fingerprint([]string{filepath.Join(tinyLlama, model.SingleFileName)})
				if err != nil {
					t.Fatal(err)
				}
				if s.Source.SHA256 != "" || s.Source.Fingerprint != fp {
					t.Errorf("source %+v, want fingerprint %s", s.Source, fp)
				}
			}
		})
	}
}

func TestConvertShardedHash(t *testing.T) {
	from := writeFixture(t, fixture{vocab: 512, dtype: model.BF16, shards: 2})
	out := filepath.Join(t.TempDir(), "model")
	if _, err := convertWith(t, context.Background(), testOptions(from, out), nil); err != nil {
		t.Fatal(err)
	}
	_, _, s, _ := loadOutput(t, out)
	// What `sha256sum model-*.safetensors | sha256sum` prints.
	var manifest strings.Builder
	for _, name := range []string{"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"} {
		fmt.Fprintf(&manifest, "%s  %s\n", fileSHA256(t, filepath.Join(from, name)), name)
	}
	sum := sha256.Sum256([]byte(manifest.String()))
	if s.Source.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("sharded sha256 %s, want %x", s.Source.SHA256, sum)
	}
	if fileSHA256(t, filepath.Join(out, model.IndexFileName)) != fileSHA256(t, filepath.Join(from, model.IndexFileName)) {
		t.Error("index changed although no shard was rewritten")
	}
}

// TestConvertRecordsWeightSums: with a full hash dllm.json records the
// sha256 of every weights file of the output, however it was made, and
// the output passes model.VerifyWeights; with a fast one it records none.
func TestConvertRecordsWeightSums(t *testing.T) {
	tests := []struct {
		name    string
		fix     *fixture // nil: tiny-llama
		dtype   string
		copy    bool // linking fails, so the weights are copied
		hash    string
		actions map[string]Action
	}{
		{name: "linked", dtype: "auto", hash: HashFull, actions: map[string]Action{model.SingleFileName: Link}},
		{name: "copied", dtype: "auto", copy: true, hash: HashFull, actions: map[string]Action{model.SingleFileName: Copy}},
		{name: "rewritten", dtype: "bf16", hash: HashFull, actions: map[string]Action{model.SingleFileName: Rewrite}},
		{name: "one shard rewritten", fix: &fixture{vocab: 500, dtype: model.BF16, shards: 2}, dtype: "auto", hash: HashFull,
			actions: map[string]Action{"model-00001-of-00002.safetensors": Rewrite, "model-00002-of-00002.safetensors": Link}},
		{name: "fast", dtype: "bf16", hash: HashFast, actions: map[string]Action{model.SingleFileName: Rewrite}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from := tinyLlama
			if tt.fix != nil {
				from = writeFixture(t, *tt.fix)
			}
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(from, out)
			o.DType, o.Hash = tt.dtype, tt.hash
			res, err := convertWith(t, context.Background(), o, func(p *Plan) {
				if tt.copy {
					p.place = func(string, string) (Action, error) { return "", syscall.EXDEV }
				}
			})
			if err != nil {
				t.Fatal(err)
			}
			for name, a := range tt.actions {
				if res.Done[name] != a {
					t.Errorf("%s was %s, want %s", name, res.Done[name], a)
				}
			}
			_, _, s, _ := loadOutput(t, out)
			var want map[string]string
			if tt.hash == HashFull {
				want = map[string]string{}
				for name := range tt.actions {
					want[name] = fileSHA256(t, filepath.Join(out, name))
				}
			}
			if !reflect.DeepEqual(s.WeightsSHA256, want) {
				t.Errorf("weights_sha256 %v, want %v", s.WeightsSHA256, want)
			}
			if err := model.VerifyWeights(context.Background(), out, s.WeightsSHA256); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestConvertForce(t *testing.T) {
	out := filepath.Join(t.TempDir(), "model")
	if _, err := convertWith(t, context.Background(), testOptions(tinyLlama, out), nil); err != nil {
		t.Fatal(err)
	}
	o := testOptions(tinyLlama, out)
	o.BlockSize = 8
	if _, err := NewPlan(o); err == nil || !strings.Contains(err.Error(), "already exists; pass --force") {
		t.Fatalf("second conversion without --force: %v", err)
	}
	o.Force = true
	if _, err := convertWith(t, context.Background(), o, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, s, _ := loadOutput(t, out); s.BlockSize != 8 {
		t.Errorf("block size %d, want the new 8", s.BlockSize)
	}
	assertNoLeftovers(t, out)
}

func TestConvertBadInput(t *testing.T) {
	tests := []struct {
		name  string
		setup func(t *testing.T, from, outParent string) (o Options) // from is a copy of tiny-llama
		want  string
	}{
		{"missing config", func(t *testing.T, from, parent string) Options {
			os.Remove(filepath.Join(from, "config.json"))
			return testOptions(from, filepath.Join(parent, "m"))
		}, "has no config.json"},
		{"missing weights", func(t *testing.T, from, parent string) Options {
			os.Remove(filepath.Join(from, model.SingleFileName))
			return testOptions(from, filepath.Join(parent, "m"))
		}, "no model.safetensors or model.safetensors.index.json"},
		{"missing tokenizer", func(t *testing.T, from, parent string) Options {
			os.Remove(filepath.Join(from, tokenizer.TokenizerFile))
			return testOptions(from, filepath.Join(parent, "m"))
		}, "has no tokenizer.json"},
		{"truncated weights", func(t *testing.T, from, parent string) Options {
			os.Truncate(filepath.Join(from, model.SingleFileName), 100_000)
			return testOptions(from, filepath.Join(parent, "m"))
		}, "truncated file?"},
		{"corrupt header", func(t *testing.T, from, parent string) Options {
			f, _ := os.OpenFile(filepath.Join(from, model.SingleFileName), os.O_WRONLY, 0)
			f.WriteAt(binary.LittleEndian.AppendUint64(nil, 1<<40), 0)
			f.Close()
			return testOptions(from, filepath.Join(parent, "m"))
		}, "header length"},
		{"shape mismatch", func(t *testing.T, from, parent string) Options {
			editConfig(t, from, `"intermediate_size": 160`, `"intermediate_size": 128`)
			return testOptions(from, filepath.Join(parent, "m"))
		}, "misshaped tensor(s)"},
		{"integer weights", func(t *testing.T, from, parent string) Options {
			c, err := model.OpenCheckpoint(tinyLlama)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var tensors []model.TensorData
			for _, ti := range c.Tensors() {
				data, _ := c.Bytes(ti.Name)
				td := model.TensorData{Name: ti.Name, DType: ti.DType, Shape: ti.Shape, Data: data}
				if ti.Name == "model.norm.weight" {
					td.DType = model.I32 // same size as F32
				}
				tensors = append(tensors, td)
			}
			if err := model.WriteSafetensors(filepath.Join(from, model.SingleFileName), tensors, nil); err != nil {
				t.Fatal(err)
			}
			return testOptions(from, filepath.Join(parent, "m"))
		}, `"model.norm.weight" is I32`},
		{"unsupported architecture", func(t *testing.T, from, parent string) Options {
			editConfig(t, from, `"LlamaForCausalLM"`, `"GPT2LMHeadModel"`)
			return testOptions(from, filepath.Join(parent, "m"))
		}, `architecture "GPT2LMHeadModel" is not supported`},
		{"tokenizer larger than the model", func(t *testing.T, from, parent string) Options {
			if err := tokenizer.AddSpecialToken(from, "<|extra|>", 600); err != nil {
				t.Fatal(err)
			}
			return testOptions(from, filepath.Join(parent, "m"))
		}, "tokenizer defines 601 ids but the model has only 512"},
		{"input is a file", func(t *testing.T, from, parent string) Options {
			return testOptions(filepath.Join(from, "config.json"), filepath.Join(parent, "m"))
		}, "is not a directory"},
		{"input missing", func(t *testing.T, from, parent string) Options {
			return testOptions(filepath.Join(parent, "nothing"), filepath.Join(parent, "m"))
		}, "no such file"},
		{"output is the input", func(t *testing.T, from, parent string) Options {
			return testOptions(from, from+"/.")
		}, "is the input directory"},
		{"output inside the input", func(t *testing.T, from, parent string) Options {
			return testOptions(from, filepath.Join(from, "sub", "m"))
		}, "is inside the input"},
		{"output inside the input through a link", func(t *testing.T, from, parent string) Options {
			os.Symlink(from, filepath.Join(parent, "link"))
			return testOptions(from, filepath.Join(parent, "link", "m"))
		}, "is inside the input"},
		{"input inside the output", func(t *testing.T, from, parent string) Options {
			o := testOptions(from, filepath.Dir(from))
			o.Force = true
			return o
		}, "is inside the output"},
		{"output exists", func(t *testing.T, from, parent string) Options {
			os.Mkdir(filepath.Join(parent, "m"), 0o755)
			return testOptions(from, filepath.Join(parent, "m"))
		}, "already exists; pass --force"},
		{"force on a directory that is not a model", func(t *testing.T, from, parent string) Options {
			os.Mkdir(filepath.Join(parent, "m"), 0o755)
			writeTestFile(t, filepath.Join(parent, "m", "precious.txt"), "x")
			o := testOptions(from, filepath.Join(parent, "m"))
			o.Force = true
			return o
		}, "refusing to replace"},
		{"force on a file", func(t *testing.T, from, parent string) Options {
			writeTestFile(t, filepath.Join(parent, "m"), "x")
			o := testOptions(from, filepath.Join(parent, "m"))
			o.Force = true
			return o
		}, "is not a directory; not replacing it"},
		{"bad dtype", func(t *testing.T, from, parent string) Options {
			o := testOptions(from, filepath.Join(parent, "m"))
			o.DType = "int8"
			return o
		}, `dtype "int8"`},
		{"bad block size", func(t *testing.T, from, parent string) Options {
			o := testOptions(from, filepath.Join(parent, "m"))
			o.BlockSize = 0
			return o
		}, "block_size 0"},
		{"bad hash", func(t *testing.T, from, parent string) Options {
			o := testOptions(from, filepath.Join(parent, "m"))
			o.Hash = "md5"
			return o
		}, `hash "md5"`},
		{"no output", func(t *testing.T, from, parent string) Options {
			return testOptions(from, "")
		}, "--out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			from, parent := copyFixture(t), t.TempDir()
			o := tt.setup(t, from, parent)
			before, _ := os.ReadDir(parent)
			_, err := convertWith(t, context.Background(), o, nil)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			if after, _ := os.ReadDir(parent); len(after) != len(before) {
				t.Errorf("the output's directory went from %d to %d entries", len(before), len(after))
			}
			if _, err := os.Stat(filepath.Join(from, "sub")); err == nil {
				t.Error("something was written inside the input")
			}
		})
	}
}

func editConfig(t *testing.T, dir, old, new string) {
	t.Helper()
	path := filepath.Join(dir, "config.json")
	data, _ := os.ReadFile(path)
	if !bytes.Contains(data, []byte(old)) {
		t.Fatalf("config.json lacks %s", old)
	}
	writeTestFile(t, path, strings.Replace(string(data), old, new, 1))
}

// failAfter fails every write once limit bytes have gone through, as a
// full disk does.
type failAfter struct {
	w     io.Writer
	limit *int
}

func (f failAfter) Write(b []byte) (int, error) {
	if len(b) > *f.limit {
		return 0, syscall.ENOSPC
	}
	*f.limit -= len(b)
	return f.w.Write(b)
}

func TestConvertWriteFailureLeavesNothing(t *testing.T) {
	tests := []struct {
		name  string
		dtype string // "auto": link; else rewrite
		copy  bool   // linking fails, so the weights are copied
		limit int
		want  string
	}{
		{"rewrite", "bf16", false, 100_000, "no space left on device"},
		{"copy", "auto", true, 100_000, "no space left on device"},
		{"small file", "auto", false, 100, "no space left on device"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(tinyLlama, out)
			o.DType = tt.dtype
			limit := tt.limit
			_, err := convertWith(t, context.Background(), o, func(p *Plan) {
				p.wrap = func(_ string, w io.Writer) io.Writer { return failAfter{w, &limit} }
				if tt.copy {
					p.place = func(string, string) (Action, error) { return "", syscall.EXDEV }
				}
			})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", err, tt.want)
			}
			assertNoOutput(t, out)
		})
	}
}

func TestConvertCancelledLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out := filepath.Join(t.TempDir(), "model")
	o := testOptions(tinyLlama, out)
	o.DType = "bf16"
	if _, err := convertWith(t, ctx, o, nil); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("error %v, want context canceled", err)
	}
	assertNoOutput(t, out)
}

func TestPlanPrint(t *testing.T) {
	tests := []struct {
		name  string
		from  func(t *testing.T) string
		dtype string
		want  []string
	}{
		{"padded", func(*testing.T) string { return tinyLlama }, "auto", []string{
			"LlamaForCausalLM, 195008 parameters, F32",
			"tokenizer defines 500 ids",
			"<|mask|> = 500, a padded row",
			"dtype:     kept (F32)",
			"block_size 32, attention block, shift true; threshold 0.9, max_steps_per_block 32",
			"link     model.safetensors",
			"edit     tokenizer.json",
			"copy     config.json",
			"write    dllm.json",
		}},
		{"grown", func(t *testing.T) string { return writeFixture(t, fixture{vocab: 500, dtype: model.BF16, shards: 1}) }, "f32", []string{
			"<|mask|> = 500, a new row",
			"vocab_size 500 -> 501",
			"dtype:     BF16 -> F32",
			"rewrite  model.safetensors",
			"adds a row to model.embed_tokens.weight",
			"edit     config.json",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "model")
			o := testOptions(tt.from(t), out)
			o.DType = tt.dtype
			p, err := NewPlan(o)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Close()
			var b strings.Builder
			p.Print(&b)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("plan lacks %q:\n%s", w, b.String())
				}
			}
			assertNoOutput(t, out) // planning writes nothing
		})
	}
}

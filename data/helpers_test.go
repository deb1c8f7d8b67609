package data

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"dllm/tokenizer"
)

const (
	tinyDir = "../testdata/tiny-llama"
	qwenDir = "../testdata/qwen3-tokenizer"
)

var (
	tinyOnce sync.Once
	tinyTok  *tokenizer.Tokenizer
	tinyErr  error
)

// tiny loads the tiny-llama tokenizer (Qwen3 chat template, <|im_end|> as
// eos, <|endoftext|>=0, <|im_end|>=1, <|im_start|>=2, <think>=3,
// </think>=4).
func tiny(t testing.TB) *tokenizer.Tokenizer {
	t.Helper()
	tinyOnce.Do(func() { tinyTok, tinyErr = tokenizer.Load(tinyDir) })
	if tinyErr != nil {
		t.Fatal(tinyErr)
	}
	return tinyTok
}

// qwenTokenizerDir gunzips Qwen3's tokenizer.json next to its config in a
// temporary directory.
func qwenTokenizerDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	f, err := os.Open(filepath.Join(qwenDir, "tokenizer.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	data, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := os.ReadFile(filepath.Join(qwenDir, "tokenizer_config.json"))
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "tokenizer.json"), data)
	writeFile(t, filepath.Join(dir, "tokenizer_config.json"), cfg)
	return dir
}

func writeFile(t testing.TB, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeJSONL writes one JSON object per line.
func writeJSONL(t testing.TB, path string, rows []map[string]any) {
	t.Helper()
	var b bytes.Buffer
	for _, r := range rows {
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	writeFile(t, path, b.Bytes())
}

// textRows makes n documents whose text names their index, of varying
// length.
func textRows(prefix string, n int) []map[string]any {
	rows := make([]map[string]any, n)
	for i := range rows {
		rows[i] = map[string]any{"text": prefix + " document " + strings.Repeat("word ", 1+(i*7)%23) + "end", "id": i}
	}
	return rows
}

var textSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "text", Type: arrow.BinaryTypes.String, Nullable: true},
}, nil)

var messageType = arrow.StructOf(
	arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "content", Type: arrow.BinaryTypes.String},
	arrow.Field{Name: "reasoning_content", Type: arrow.BinaryTypes.String, Nullable: true},
)

var chatSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "messages", Type: arrow.ListOf(messageType)},
}, nil)

// record builds an Arrow record from JSON rows.
func record(t testing.TB, schema *arrow.Schema, rows any) arrow.RecordBatch {
	t.Helper()
	data, err := json.Marshal(rows)
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := array.RecordFromJSON(memory.DefaultAllocator, schema, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// writeParquet writes rows in small row groups, so readers cross them.
func writeParquet(t testing.TB, path string, schema *arrow.Schema, rows any) {
	t.Helper()
	rec := record(t, schema, rows)
	defer rec.Release()
	writeParquetRecord(t, path, rec)
}

// writeParquetRecord writes rec in small row groups.
func writeParquetRecord(t testing.TB, path string, rec arrow.RecordBatch) {
	t.Helper()
	schema := rec.Schema()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, parquet.NewWriterProperties(parquet.WithMaxRowGroupLength(3)), pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// writeArrow writes rows as an Arrow IPC file (stream=false) or stream, in
// two record batches.
func writeArrow(t testing.TB, path string, schema *arrow.Schema, rows []map[string]any, stream bool) {
	t.Helper()
	half := len(rows) / 2
	var recs []arrow.RecordBatch
	for _, part := range [][]map[string]any{rows[:half], rows[half:]} {
		recs = append(recs, record(t, schema, part))
	}
	writeArrowRecords(t, path, schema, recs, stream)
}

// writeArrowRecords writes recs as an Arrow IPC file or stream and
// releases them.
func writeArrowRecords(t testing.TB, path string, schema *arrow.Schema, recs []arrow.RecordBatch, stream bool) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w interface {
		Write(arrow.RecordBatch) error
		Close() error
	}
	if stream {
		w = ipc.NewWriter(f, ipc.WithSchema(schema))
	} else if w, err = ipc.NewFileWriter(f, ipc.WithSchema(schema)); err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if err := w.Write(rec); err != nil {
			t.Fatal(err)
		}
		rec.Release()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// readAll collects a file's records.
func readAll(t testing.TB, path string, src SourceConfig) ([]rawRecord, error) {
	t.Helper()
	if src.MaxLineBytes == 0 {
		src.MaxLineBytes = DefaultMaxLineBytes
	}
	format, err := formatOf(path, src.Format)
	if err != nil {
		return nil, err
	}
	var out []rawRecord
	err = readFile(context.Background(), FileInfo{Path: path, Format: format}, src, func(r rawRecord) error {
		out = append(out, r)
		return nil
	})
	return out, err
}

// shardFiles lists the shards of an output directory.
func shardFiles(t testing.TB, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "shard-*.bin"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// readShards returns every sequence of every shard in dir, in order.
type seqData struct {
	tokens []uint32
	loss   []bool
	starts []uint32
}

func readShards(t testing.TB, dir string) []seqData {
	t.Helper()
	var out []seqData
	for _, f := range shardFiles(t, dir) {
		s, err := OpenShard(f)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < s.NumSeqs(); i++ {
			tok, loss, starts := s.Seq(i)
			sd := seqData{tokens: append([]uint32(nil), tok...), starts: append([]uint32(nil), starts...)}
			for j := range tok {
				sd.loss = append(sd.loss, loss.On(j))
			}
			out = append(out, sd)
		}
		s.Close()
	}
	return out
}

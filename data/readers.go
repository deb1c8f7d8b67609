package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// rawRecord is one row's field before tokenization: the text of a text
// source or the JSON message list of a chat source.
type rawRecord struct {
	value string
	null  bool // the field was null or missing
}

// emitFunc receives records in file order; an error stops the reader.
type emitFunc func(rawRecord) error

// parquetBatchRows bounds the rows decoded at once from a Parquet file:
// a few hundred documents, never a whole row group.
const parquetBatchRows = 256

// readFile streams the records of one file.
func readFile(ctx context.Context, fi FileInfo, src SourceConfig, emit emitFunc) error {
	var err error
	switch fi.Format {
	case FormatParquet:
		err = readParquet(ctx, fi.Path, src, emit)
	case FormatArrow:
		err = readArrow(ctx, fi.Path, src, emit)
	case FormatJSONL:
		err = readJSONL(ctx, fi.Path, src, emit)
	default:
		err = fmt.Errorf("unknown format %q", fi.Format)
	}
	if err != nil && !errors.Is(err, context.Canceled) && !errors.Is(err, errStopReading) {
		return fmt.Errorf("source %q: %s: %w", src.Name, fi.Path, err)
	}
	return err
}

// errStopReading ends a read early without being an error.
var errStopReading = errors.New("stop reading")

func readParquet(ctx context.Context, path string, src SourceConfig, emit emitFunc) error {
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		return err
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: parquetBatchRows}, memory.DefaultAllocator)
	if err != nil {
		return err
	}
	// Read only the leaves of the wanted column; a corpus row may carry
	// many other columns (URLs, scores, metadata).
	var leaves []int
	var names []string
	for _, f := range fr.Manifest.Fields {
		names = append(names, f.Field.Name)
		if f.Field.Name == src.Field {
			leaves = appendLeaves(leaves, &f)
		}
	}
	if len(leaves) == 0 {
		return fmt.Errorf("no column %q (columns: %s); set field:", src.Field, strings.Join(names, ", "))
	}
	rr, err := fr.GetRecordReader(ctx, leaves, nil)
	if err != nil {
		return err
	}
	defer rr.Release()
	for rr.Next() {
		rec := rr.RecordBatch()
		if err := emitColumn(ctx, rec.Column(0), src.Kind, emit); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func appendLeaves(dst []int, f *pqarrow.SchemaField) []int {
	if f.IsLeaf() {
		return append(dst, f.ColIndex)
	}
	for i := range f.Children {
		dst = appendLeaves(dst, &f.Children[i])
	}
	return dst
}

func readArrow(ctx context.Context, path string, src SourceConfig, emit emitFunc) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	magic := make([]byte, 6)
	if _, err := io.ReadFull(f, magic); err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("read Arrow magic: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	// The IPC file format starts with "ARROW1"; anything else is tried as
	// the stream format (which is what HF datasets' .arrow files are).
	if string(magic) == "ARROW1" {
		r, err := ipc.NewFileReader(f)
		if err != nil {
			return err
		}
		defer r.Close()
		col, err := columnIndex(r.Schema(), src.Field)
		if err != nil {
			return err
		}
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				return err
			}
			if err := emitColumn(ctx, rec.Column(col), src.Kind, emit); err != nil {
				return err
			}
		}
		return nil
	}
	r, err := ipc.NewReader(bufio.NewReaderSize(f, 1<<20))
	if err != nil {
		return fmt.Errorf("not an Arrow IPC file or stream: %w", err)
	}
	defer r.Release()
	col, err := columnIndex(r.Schema(), src.Field)
	if err != nil {
		return err
	}
	for r.Next() {
		if err := emitColumn(ctx, r.RecordBatch().Column(col), src.Kind, emit); err != nil {
			return err
		}
	}
	if err := r.Err(); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	return nil
}

func columnIndex(s *arrow.Schema, name string) (int, error) {
	idx := s.FieldIndices(name)
	if len(idx) == 0 {
		var names []string
		for _, f := range s.Fields() {
			names = append(names, f.Name)
		}
		return 0, fmt.Errorf("no column %q (columns: %s); set field:", name, strings.Join(names, ", "))
	}
	return idx[0], nil
}

// emitColumn emits every row of an Arrow column.
func emitColumn(ctx context.Context, col arrow.Array, kind string, emit emitFunc) error {
	for i := 0; i < col.Len(); i++ {
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		r, err := arrowValue(col, i, kind)
		if err != nil {
			return err
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	return nil
}

// arrowValue reads row i: a string for text; for chat, a JSON string or a
// list of message structs, which is turned into JSON.
func arrowValue(col arrow.Array, i int, kind string) (r rawRecord, err error) {
	if col.IsNull(i) {
		return rawRecord{null: true}, nil
	}
	switch a := col.(type) {
	case interface{ Value(int) string }:
		return rawRecord{value: a.Value(i)}, nil
	case interface{ Value(int) []byte }:
		return rawRecord{value: string(a.Value(i))}, nil
	case array.ListLike:
		if kind != KindChat {
			break
		}
		// arrow-go panics when a value cannot be marshalled; bad input
		// must be an error instead.
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("row %d: cannot convert messages to JSON: %v", i, p)
			}
		}()
		b, err := json.Marshal(a.GetOneForMarshal(i))
		if err != nil {
			return r, fmt.Errorf("row %d: messages to JSON: %w", i, err)
		}
		return rawRecord{value: string(b)}, nil
	}
	want := "a string column"
	if kind == KindChat {
		want = "a list of {role, content} structs or a JSON string"
	}
	return r, fmt.Errorf("column type %s: want %s", col.DataType(), want)
}

func readJSONL(ctx context.Context, path string, src SourceConfig, emit emitFunc) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var in io.Reader = bufio.NewReaderSize(f, 64<<10)
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		gz, err := gzip.NewReader(in)
		if err != nil {
			return err
		}
		defer gz.Close()
		in = gz
	}
	sc := bufio.NewScanner(in)
	// The limit is the larger of the two arguments, so the initial buffer
	// must not exceed it.
	sc.Buffer(make([]byte, 0, min(64<<10, src.MaxLineBytes)), src.MaxLineBytes)
	for line := 1; sc.Scan(); line++ {
		if line%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 {
			continue
		}
		r, err := jsonField(b, src.Field, src.Kind)
		if err != nil {
			return fmt.Errorf("line %d: %w", line, err)
		}
		if err := emit(r); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return fmt.Errorf("a line is longer than max_line_bytes (%d): raise it in the source's config", src.MaxLineBytes)
		}
		return err
	}
	return nil
}

// jsonField extracts field from one JSON object line.
func jsonField(line []byte, field, kind string) (rawRecord, error) {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(line, &obj); err != nil {
		return rawRecord{}, fmt.Errorf("not a JSON object: %w", err)
	}
	v, ok := obj[field]
	if !ok || string(v) == "null" {
		return rawRecord{null: true}, nil
	}
	if v[0] == '"' {
		var s string
		if err := json.Unmarshal(v, &s); err != nil {
			return rawRecord{}, fmt.Errorf("field %q: %w", field, err)
		}
		// A chat field given as a string holds the messages as JSON text.
		return rawRecord{value: s}, nil
	}
	if kind == KindChat && v[0] == '[' {
		return rawRecord{value: string(v)}, nil
	}
	return rawRecord{}, fmt.Errorf("field %q is %s, want a string", field, jsonKind(v))
}

func jsonKind(v json.RawMessage) string {
	switch v[0] {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	}
	return "a number"
}

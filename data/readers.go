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
	"maps"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

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
	// fields, for a JSON record without the field, are the keys it has.
	fields []string
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
	rows := rowEmitter{kind: src.Kind, emit: emit}
	for rr.Next() {
		if err := rows.column(ctx, rr.RecordBatch().Column(0)); err != nil {
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
		rows := rowEmitter{kind: src.Kind, emit: emit}
		for i := 0; i < r.NumRecords(); i++ {
			rec, err := r.RecordBatch(i)
			if err != nil {
				return err
			}
			if err := rows.column(ctx, rec.Column(col)); err != nil {
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
	rows := rowEmitter{kind: src.Kind, emit: emit}
	for r.Next() {
		if err := rows.column(ctx, r.RecordBatch().Column(col)); err != nil {
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

// rowEmitter emits the rows of a file's column, batch after batch; it
// numbers them across batches, so that an error names the row in the file.
type rowEmitter struct {
	kind string
	emit emitFunc
	row  int64
}

// column emits every row of one batch's column.
func (e *rowEmitter) column(ctx context.Context, col arrow.Array) error {
	for i := 0; i < col.Len(); i++ {
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		r, err := arrowValue(col, i, e.kind)
		if err != nil {
			return fmt.Errorf("row %d (0-based): %w", e.row, err)
		}
		if err := e.emit(r); err != nil {
			return err
		}
		e.row++
	}
	return nil
}

// arrowValue reads row i: a string for text; for chat, a JSON string or a
// list of message structs, which is turned into JSON.
func arrowValue(col arrow.Array, i int, kind string) (r rawRecord, err error) {
	if col.IsNull(i) {
		return rawRecord{null: true}, nil
	}
	// Arrow does not validate strings, and JSON encoding would turn bad
	// bytes into U+FFFD without a word.
	if err := checkUTF8(col, i); err != nil {
		return r, err
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
				err = fmt.Errorf("cannot convert messages to JSON: %v", p)
			}
		}()
		b, err := json.Marshal(a.GetOneForMarshal(i))
		if err != nil {
			return r, fmt.Errorf("messages to JSON: %w", err)
		}
		return rawRecord{value: string(b)}, nil
	}
	want := "a string column"
	if kind == KindChat {
		want = "a list of {role, content} structs or a JSON string"
	}
	return r, fmt.Errorf("column type %s: want %s", col.DataType(), want)
}

// checkUTF8 checks every string and binary value in row i of col, inside
// lists and structs too (the messages of a chat).
func checkUTF8(col arrow.Array, i int) error {
	if col.IsNull(i) {
		return nil
	}
	var v string
	switch a := col.(type) {
	case interface{ Value(int) string }:
		v = a.Value(i)
	case interface{ Value(int) []byte }:
		v = string(a.Value(i))
	case array.ListLike:
		lo, hi := a.ValueOffsets(i)
		for j := lo; j < hi; j++ {
			if err := checkUTF8(a.ListValues(), int(j)); err != nil {
				return err
			}
		}
		return nil
	case *array.Struct:
		for f := 0; f < a.NumField(); f++ {
			if err := checkUTF8(a.Field(f), i); err != nil {
				return err
			}
		}
		return nil
	}
	if k := invalidUTF8(v); k >= 0 {
		return fmt.Errorf("invalid UTF-8 at byte %d of a value (byte 0x%02x); the column must hold UTF-8 text: fix or drop that row", k, v[k])
	}
	return nil
}

func readJSONL(ctx context.Context, path string, src SourceConfig, emit emitFunc) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var in io.Reader = bufio.NewReaderSize(f, 64<<10)
	gzNote := ""
	if strings.HasSuffix(strings.ToLower(path), ".gz") {
		gzNote = " of the decompressed text"
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
	var next, start int64 // offsets of the next line and of the current one
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		adv, tok, err := bufio.ScanLines(data, atEOF)
		if tok != nil {
			start = next
		}
		next += int64(adv)
		return adv, tok, err
	})
	for line := 1; sc.Scan(); line++ {
		if line%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		// encoding/json would turn bad bytes into U+FFFD without a word, so
		// damaged text would be trained on as if it were the corpus.
		if !utf8.Valid(sc.Bytes()) {
			k := invalidUTF8(string(sc.Bytes()))
			return fmt.Errorf("line %d: invalid UTF-8 at byte offset %d%s (byte 0x%02x); the file must be UTF-8 text: fix or drop that line", line, start+int64(k), gzNote, sc.Bytes()[k])
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
	if !ok {
		keys := slices.Sorted(maps.Keys(obj))
		if keys == nil {
			keys = []string{} // an empty object: still no field
		}
		return rawRecord{null: true, fields: keys}, nil
	}
	if string(v) == "null" {
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

// invalidUTF8 returns the offset of the first byte of s that is not part
// of valid UTF-8, or -1.
func invalidUTF8(s string) int {
	if utf8.ValidString(s) {
		return -1
	}
	for i, r := range s {
		// A decoding error yields U+FFFD of width 1; the character itself
		// is three bytes.
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], string(utf8.RuneError)) {
			return i
		}
	}
	return -1
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

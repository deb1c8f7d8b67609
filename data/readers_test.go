package data

import (
	"bytes"
	"cmp"
	"compress/gzip"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
)

var chatRows = []map[string]any{
	{"id": 0, "messages": []map[string]any{{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello", "reasoning_content": "Greet."}}},
	{"id": 1, "messages": []map[string]any{{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4", "reasoning_content": nil}}},
	{"id": 2, "messages": []map[string]any{{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}, {"role": "assistant", "content": "A", "reasoning_content": "R"}}},
}

// TestReaders reads the same rows from every supported container and
// checks that they arrive complete and in order.
func TestDataReaders(t *testing.T) {
	dir := t.TempDir()
	texts := textRows("t", 7)
	texts[3]["text"] = nil // a null is a record, skipped later as empty
	gz := func(path string, rows []map[string]any) {
		var raw, b bytes.Buffer
		for _, r := range rows {
			line, _ := json.Marshal(r)
			raw.Write(line)
			raw.WriteByte('\n')
		}
		zw := gzip.NewWriter(&b)
		zw.Write(raw.Bytes())
		zw.Close()
		writeFile(t, path, b.Bytes())
	}
	cases := []struct {
		name  string
		file  string
		kind  string
		write func(path string)
	}{
		{"jsonl text", "t.jsonl", KindText, func(p string) { writeJSONL(t, p, texts) }},
		{"jsonl.gz text", "t.jsonl.gz", KindText, func(p string) { gz(p, texts) }},
		{"parquet text", "t.parquet", KindText, func(p string) { writeParquet(t, p, textSchema, texts) }},
		{"arrow file text", "t.arrow", KindText, func(p string) { writeArrow(t, p, textSchema, texts, false) }},
		{"arrow stream text", "ts.arrow", KindText, func(p string) { writeArrow(t, p, textSchema, texts, true) }},
		{"jsonl chat", "c.jsonl", KindChat, func(p string) { writeJSONL(t, p, chatRows) }},
		{"parquet chat", "c.parquet", KindChat, func(p string) { writeParquet(t, p, chatSchema, chatRows) }},
		{"arrow file chat", "c.arrow", KindChat, func(p string) { writeArrow(t, p, chatSchema, chatRows, false) }},
		{"arrow stream chat", "cs.arrow", KindChat, func(p string) { writeArrow(t, p, chatSchema, chatRows, true) }},
	}
	tok := tiny(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			c.write(path)
			field := "text"
			if c.kind == KindChat {
				field = "messages"
			}
			recs, err := readAll(t, path, SourceConfig{Name: "s", Kind: c.kind, Field: field, Format: FormatAuto})
			if err != nil {
				t.Fatal(err)
			}
			if c.kind == KindText {
				if len(recs) != len(texts) {
					t.Fatalf("%d records, want %d", len(recs), len(texts))
				}
				for i, r := range recs {
					want, _ := texts[i]["text"].(string)
					if r.value != want || r.null != (texts[i]["text"] == nil) {
						t.Errorf("record %d = %+v, want %q", i, r, want)
					}
				}
				return
			}
			if len(recs) != len(chatRows) {
				t.Fatalf("%d records, want %d", len(recs), len(chatRows))
			}
			// Whatever the container, a conversation renders the same.
			enc := chatEncoder(t, tok, nil, true)
			for i, r := range recs {
				want, _ := json.Marshal(chatRows[i]["messages"])
				a := enc.encode(&SourceConfig{Kind: KindChat}, r)
				b := enc.encode(&SourceConfig{Kind: KindChat}, rawRecord{value: string(want)})
				if len(a.docs) != 1 || markup(tok, a.docs[0]) != markup(tok, b.docs[0]) {
					t.Errorf("record %d renders differently from its JSON (%s): %v %s", i, r.value, a.skips, a.err)
				}
			}
		})
	}
}

func TestDataReaderErrors(t *testing.T) {
	dir := t.TempDir()
	writeParquet(t, filepath.Join(dir, "t.parquet"), textSchema, textRows("x", 2))
	writeArrow(t, filepath.Join(dir, "t.arrow"), textSchema, textRows("x", 2), false)
	writeFile(t, filepath.Join(dir, "bad.jsonl"), []byte("{\"text\": \"ok\"}\n{\"text\": oops}\n"))
	writeFile(t, filepath.Join(dir, "num.jsonl"), []byte("{\"text\": 3}\n"))
	writeFile(t, filepath.Join(dir, "long.jsonl"), []byte("{\"text\": \""+strings.Repeat("a", 5000)+"\"}\n"))
	writeFile(t, filepath.Join(dir, "junk.arrow"), []byte("definitely not arrow"))
	writeFile(t, filepath.Join(dir, "data.txt"), []byte("x"))
	cases := []struct {
		file, field, kind string
		maxLine           int
		want              string
	}{
		{"t.parquet", "body", KindText, 0, `no column "body" (columns: id, text)`},
		{"t.parquet", "id", KindText, 0, "column type int64: want a string column"},
		{"t.arrow", "body", KindText, 0, `no column "body"`},
		{"bad.jsonl", "text", KindText, 0, "line 2: not a JSON object"},
		{"num.jsonl", "text", KindText, 0, `line 1: field "text" is a number, want a string`},
		{"long.jsonl", "text", KindText, 1000, "longer than max_line_bytes (1000)"},
		{"junk.arrow", "text", KindText, 0, "not an Arrow IPC file or stream"},
		{"data.txt", "text", KindText, 0, "cannot tell the format"},
	}
	for _, c := range cases {
		t.Run(c.file+" "+c.field, func(t *testing.T) {
			_, err := readAll(t, filepath.Join(dir, c.file), SourceConfig{Name: "s", Kind: c.kind, Field: c.field, Format: FormatAuto, MaxLineBytes: c.maxLine})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

// TestDataInvalidUTF8 feeds every reader a record with bytes that are not
// UTF-8: each is an error naming the file and where in it, never text
// with U+FFFD in their place.
func TestDataInvalidUTF8(t *testing.T) {
	dir := t.TempDir()
	ok := `{"text": "fine"}` + "\n"
	cases := []struct {
		name, file, kind, field string
		content                 []byte // a JSONL file; nil: write instead
		write                   func(path string)
		want                    string
	}{
		{name: "text field", file: "a.jsonl", content: []byte(ok + "{\"text\": \"bad \xff byte\"}\n"),
			want: "a.jsonl: line 2: invalid UTF-8 at byte offset 31 (byte 0xff)"},
		{name: "truncated character", file: "b.jsonl", content: []byte(ok + ok + "{\"text\": \"caf\xc3\"}\n"),
			want: "b.jsonl: line 3: invalid UTF-8 at byte offset 47 (byte 0xc3)"},
		{name: "crlf and blank lines", file: "c.jsonl", content: []byte("{\"text\": \"fine\"}\r\n\r\n{\"text\": \"\xe2\x82\"}\r\n"),
			want: "c.jsonl: line 3: invalid UTF-8 at byte offset 30 (byte 0xe2)"},
		{name: "other field", file: "d.jsonl", content: []byte("{\"meta\": \"\xc0\xaf\", \"text\": \"fine\"}\n"),
			want: "d.jsonl: line 1: invalid UTF-8 at byte offset 10 (byte 0xc0)"},
		{name: "gzip", file: "e.jsonl.gz", content: gzipped(t, []byte(ok+"{\"text\": \"\xff\"}\n")),
			want: "e.jsonl.gz: line 2: invalid UTF-8 at byte offset 27 of the decompressed text (byte 0xff)"},
		{name: "chat messages", file: "f.jsonl", kind: KindChat, field: "messages",
			content: []byte("{\"messages\": [{\"role\": \"user\", \"content\": \"\xfe\"}]}\n"),
			want:    "f.jsonl: line 1: invalid UTF-8 at byte offset 43 (byte 0xfe)"},
		{name: "parquet text", file: "t.parquet", write: func(p string) {
			rec := brokenRecord(t, textSchema, textRows("x", 7), 5)
			defer rec.Release()
			writeParquetRecord(t, p, rec)
		}, want: "t.parquet: row 5 (0-based): invalid UTF-8 at byte 2 of a value (byte 0xff)"},
		{name: "arrow text", file: "t.arrow", write: func(p string) {
			rows := textRows("x", 7)
			recs := []arrow.RecordBatch{record(t, textSchema, rows[:3]), brokenRecord(t, textSchema, rows[3:], 2)}
			writeArrowRecords(t, p, textSchema, recs, true)
		}, want: "t.arrow: row 5 (0-based): invalid UTF-8 at byte 2 of a value (byte 0xff)"},
		{name: "arrow chat", file: "c.arrow", kind: KindChat, field: "messages", write: func(p string) {
			recs := []arrow.RecordBatch{record(t, chatSchema, chatRows[:1]), brokenRecord(t, chatSchema, chatRows[1:], 1)}
			writeArrowRecords(t, p, chatSchema, recs, false)
		}, want: "c.arrow: row 2 (0-based): invalid UTF-8 at byte 2 of a value (byte 0xff)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			if c.write != nil {
				c.write(path)
			} else {
				writeFile(t, path, c.content)
			}
			kind, field := cmp.Or(c.kind, KindText), cmp.Or(c.field, "text")
			_, err := readAll(t, path, SourceConfig{Name: "s", Kind: kind, Field: field, Format: FormatAuto})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
}

func gzipped(t *testing.T, b []byte) []byte {
	t.Helper()
	var out bytes.Buffer
	zw := gzip.NewWriter(&out)
	zw.Write(b)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

// brokenRecord is rows as a record in which row's strings have their
// third byte replaced by 0xff, which is never UTF-8.
func brokenRecord(t *testing.T, schema *arrow.Schema, rows []map[string]any, row int) arrow.RecordBatch {
	t.Helper()
	rec := record(t, schema, rows)
	breakUTF8(rec.Column(1), row, row+1)
	return rec
}

// breakUTF8 overwrites the third byte of every string of rows [lo, hi),
// inside lists and structs too.
func breakUTF8(a arrow.Array, lo, hi int) {
	switch a := a.(type) {
	case *array.String:
		for i := lo; i < hi; i++ {
			if !a.IsNull(i) && a.ValueLen(i) > 2 {
				a.ValueBytes()[a.ValueOffset(i)-a.ValueOffset(0)+2] = 0xff
			}
		}
	case array.ListLike:
		s, _ := a.ValueOffsets(lo)
		_, e := a.ValueOffsets(hi - 1)
		breakUTF8(a.ListValues(), int(s), int(e))
	case *array.Struct:
		for f := 0; f < a.NumField(); f++ {
			breakUTF8(a.Field(f), lo, hi)
		}
	}
}

package data

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
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

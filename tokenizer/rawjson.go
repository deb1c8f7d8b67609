package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// rawObject is a JSON object kept as ordered raw fields, so that editing
// one field rewrites a file without losing or reordering the others.
type rawObject []rawField

type rawField struct {
	Key   string
	Value json.RawMessage
}

func parseRawObject(data []byte) (rawObject, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	if tok, err := d.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object")
	}
	var obj rawObject
	for d.More() {
		tok, err := d.Token()
		if err != nil {
			return nil, err
		}
		var v json.RawMessage
		if err := d.Decode(&v); err != nil {
			return nil, err
		}
		obj = append(obj, rawField{tok.(string), v})
	}
	if _, err := d.Token(); err != nil {
		return nil, err
	}
	return obj, nil
}

func (o rawObject) get(key string) (json.RawMessage, bool) {
	for _, f := range o {
		if f.Key == key {
			return f.Value, true
		}
	}
	return nil, false
}

// set replaces key's value in place, or appends the field.
func (o *rawObject) set(key string, v json.RawMessage) {
	for i := range *o {
		if (*o)[i].Key == key {
			(*o)[i].Value = v
			return
		}
	}
	*o = append(*o, rawField{key, v})
}

// insert puts a field at index i.
func (o *rawObject) insert(i int, key string, v json.RawMessage) {
	*o = append(*o, rawField{})
	copy((*o)[i+1:], (*o)[i:])
	(*o)[i] = rawField{key, v}
}

// MarshalJSON writes the fields in order, indented like transformers'
// files (two spaces).
func (o rawObject) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		key, err := marshalRaw(f.Key)
		if err != nil {
			return nil, err
		}
		b.Write(key)
		b.WriteByte(':')
		b.Write(f.Value)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func (o rawObject) indented() ([]byte, error) {
	compact, err := o.MarshalJSON()
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := json.Indent(&b, compact, "", "  "); err != nil {
		return nil, err
	}
	b.WriteByte('\n')
	return b.Bytes(), nil
}

// marshalRaw is json.Marshal without HTML escaping, so that tokens such as
// "<|im_end|>" stay readable (json.Marshal writes "\u003c|im_end|\u003e").
func marshalRaw(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

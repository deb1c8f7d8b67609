package convert

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// setFields replaces the values of top-level keys of a JSON object and
// leaves every other byte as it was, so that an edited config.json differs
// from its source only where it must. Keys the object lacks are skipped:
// the caller only changes what the source declares.
func setFields(data []byte, values map[string]json.RawMessage) ([]byte, error) {
	type span struct {
		start, end int64
		value      json.RawMessage
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("want a JSON object")
	}
	var spans []span
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, err
		}
		if v, ok := values[tok.(string)]; ok {
			end := dec.InputOffset()
			spans = append(spans, span{end - int64(len(raw)), end, v})
		}
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	var out bytes.Buffer
	prev := int64(0)
	for _, s := range spans {
		out.Write(data[prev:s.start])
		out.Write(s.value)
		prev = s.end
	}
	out.Write(data[prev:])
	return out.Bytes(), nil
}

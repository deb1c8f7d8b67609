package tokenizer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/nikolalohinski/gonja/v2/exec"
)

// decodeOrdered decodes JSON into template values, keeping object keys in
// document order (as gonja's *exec.Dict) because templates print tool
// schemas with tojson and Python keeps insertion order.
func decodeOrdered(data []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(data))
	d.UseNumber()
	v, err := decodeValue(d)
	if err != nil {
		return nil, err
	}
	if _, err := d.Token(); err == nil {
		return nil, fmt.Errorf("trailing data after JSON value")
	}
	return v, nil
}

func decodeValue(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			list := []any{}
			for d.More() {
				v, err := decodeValue(d)
				if err != nil {
					return nil, err
				}
				list = append(list, v)
			}
			_, err := d.Token()
			return list, err
		}
		dict := exec.NewDict()
		for d.More() {
			key, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(d)
			if err != nil {
				return nil, err
			}
			dict.Pairs = append(dict.Pairs, &exec.Pair{Key: exec.AsValue(key), Value: exec.AsValue(v)})
		}
		_, err := d.Token()
		return dict, err
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return int(i), nil
		}
		return t.Float64()
	}
	return tok, nil
}

// pyJSON writes v as Python's json.dumps does with the arguments
// transformers' tojson filter passes (ensure_ascii=False by default, ", "
// and ": " separators, or "," and newlines when indenting).
type pyJSON struct {
	indent      int // < 0: single line
	ensureASCII bool
	sortKeys    bool
	b           strings.Builder
}

func (p *pyJSON) value(v *exec.Value, depth int) error {
	switch {
	case v.IsNil():
		p.b.WriteString("null")
	case v.IsBool():
		p.b.WriteString(map[bool]string{true: "true", false: "false"}[v.Bool()])
	case v.IsString():
		p.str(v.String())
	case v.IsInteger():
		p.b.WriteString(strconv.Itoa(v.Integer()))
	case v.IsFloat():
		p.b.WriteString(pyFloat(v.Float()))
	case v.IsDict():
		type kv struct {
			k string
			v *exec.Value
		}
		var items []kv
		v.Iterate(func(_, _ int, key, val *exec.Value) bool {
			items = append(items, kv{key.String(), val})
			return true
		}, func() {})
		if p.sortKeys {
			sort.SliceStable(items, func(i, j int) bool { return items[i].k < items[j].k })
		}
		p.b.WriteByte('{')
		for i, it := range items {
			p.sep(i, depth+1)
			p.str(it.k)
			p.b.WriteString(": ")
			if err := p.value(it.v, depth+1); err != nil {
				return err
			}
		}
		p.close(len(items), depth, '}')
	case v.IsList():
		n := 0
		var err error
		p.b.WriteByte('[')
		v.Iterate(func(i, _ int, item, _ *exec.Value) bool {
			p.sep(i, depth+1)
			n++
			err = p.value(item, depth+1)
			return err == nil
		}, func() {})
		if err != nil {
			return err
		}
		p.close(n, depth, ']')
	default:
		return fmt.Errorf("tojson: cannot serialise %s", v.String())
	}
	return nil
}

// sep writes what precedes the i-th item of a container: its opening was
// already written by the caller for i == 0.
func (p *pyJSON) sep(i, depth int) {
	if i == 0 && p.indent < 0 {
		return
	}
	if i > 0 {
		p.b.WriteByte(',')
		if p.indent < 0 {
			p.b.WriteByte(' ')
			return
		}
	}
	p.b.WriteByte('\n')
	p.b.WriteString(strings.Repeat(" ", p.indent*depth))
}

func (p *pyJSON) close(n, depth int, c byte) {
	if n > 0 && p.indent >= 0 {
		p.b.WriteByte('\n')
		p.b.WriteString(strings.Repeat(" ", p.indent*depth))
	}
	p.b.WriteByte(c)
}

func (p *pyJSON) str(s string) {
	p.b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			p.b.WriteString(`\"`)
		case r == '\\':
			p.b.WriteString(`\\`)
		case r == '\n':
			p.b.WriteString(`\n`)
		case r == '\r':
			p.b.WriteString(`\r`)
		case r == '\t':
			p.b.WriteString(`\t`)
		case r == '\b':
			p.b.WriteString(`\b`)
		case r == '\f':
			p.b.WriteString(`\f`)
		case r < 0x20 || p.ensureASCII && r > 0x7E:
			if r > 0xFFFF {
				hi, lo := utf16.EncodeRune(r)
				fmt.Fprintf(&p.b, `\u%04x\u%04x`, hi, lo)
			} else {
				fmt.Fprintf(&p.b, `\u%04x`, r)
			}
		default:
			p.b.WriteRune(r)
		}
	}
	p.b.WriteByte('"')
}

// pyFloat formats like Python's float repr: shortest round-trip digits,
// positional for exponents in [-4, 16), always with a fractional part.
func pyFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "NaN"
	case math.IsInf(f, 1):
		return "Infinity"
	case math.IsInf(f, -1):
		return "-Infinity"
	}
	e := strconv.FormatFloat(f, 'e', -1, 64)
	_, expStr, _ := strings.Cut(e, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		return e
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.Contains(s, ".") {
		s += ".0"
	}
	return s
}

// toJSONFilter replaces gonja's tojson, which follows Go's encoding/json
// (sorted keys, no spaces, HTML escaping) rather than Python's.
func toJSONFilter(_ *exec.Evaluator, in *exec.Value, params *exec.VarArgs) *exec.Value {
	if in.IsError() {
		return in
	}
	p := &pyJSON{indent: -1}
	for k, v := range params.KwArgs {
		switch k {
		case "indent":
			if !v.IsNil() {
				p.indent = v.Integer()
			}
		case "ensure_ascii":
			p.ensureASCII = v.IsTrue()
		case "sort_keys":
			p.sortKeys = v.IsTrue()
		default:
			return exec.AsValue(fmt.Errorf("tojson: unsupported argument %q", k))
		}
	}
	if len(params.Args) > 0 && !params.Args[0].IsNil() {
		p.indent = params.Args[0].Integer()
	}
	if err := p.value(in, 0); err != nil {
		return exec.AsValue(err)
	}
	return exec.AsSafeValue(p.b.String())
}

package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// fields are the fields of a struct type as encoding/json names them (no
// attribute type embeds a struct), in order: what knownKeys checks keys
// against and what the scanner decodes into.
type fields struct {
	list []field
}

// field is one field of a struct type.
type field struct {
	name   string // its JSON name
	index  int    // its index in the struct
	kind   fieldKind
	nested *fields // the fields of a struct field (Failure), else nil
}

// fieldKind is what a field holds, as the scanner decodes it.
type fieldKind uint8

const (
	kindString fieldKind = iota
	kindInt              // int or int64
	kindBool
	kindRaw    // json.RawMessage
	kindTime   // time.Time
	kindStruct // decoded field by field, with nested
)

var (
	timeType    = reflect.TypeFor[time.Time]()
	rawJSONType = reflect.TypeFor[json.RawMessage]()
)

// jsonFields returns the fields of struct type t.
func jsonFields(t reflect.Type) *fields {
	fs := &fields{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		fd := field{name: name, index: f.Index[0]}
		switch ft := f.Type; {
		case ft == timeType:
			fd.kind = kindTime
		case ft == rawJSONType:
			fd.kind = kindRaw
		case ft.Kind() == reflect.Struct:
			fd.kind, fd.nested = kindStruct, jsonFields(ft)
		case ft.Kind() == reflect.String:
			fd.kind = kindString
		case ft.Kind() == reflect.Int, ft.Kind() == reflect.Int64:
			fd.kind = kindInt
		case ft.Kind() == reflect.Bool:
			fd.kind = kindBool
		default:
			panic(fmt.Sprintf("history: field %s of %s is a %s, which knownKeys and the scanner cannot decode: teach them, or use a string, int, int64, bool, time.Time, json.RawMessage or struct", f.Name, t, ft))
		}
		fs.list = append(fs.list, fd)
	}
	return fs
}

// knownKeys returns an error naming the first key of the JSON object b,
// or of an object in it that decodes into a struct, that is no field of
// fs, matched as encoding/json matches them (exactly, or else without
// case); b is valid JSON, as json.Unmarshal found it. A value that is not
// an object (null) has no keys.
func knownKeys(b []byte, fs *fields) error {
	_, err := checkObject(b, skipSpace(b, 0), fs)
	return err
}

// checkObject checks the keys of the value at b[i] (see knownKeys), and
// returns the index past it.
func checkObject(b []byte, i int, fs *fields) (int, error) {
	if i >= len(b) || b[i] != '{' {
		return skipValue(b, i), nil
	}
	i++
	for {
		i = skipSpace(b, i)
		if b[i] == '}' {
			return i + 1, nil
		}
		if b[i] == ',' {
			i = skipSpace(b, i+1)
		}
		end := skipString(b, i)
		key := b[i+1 : end-1]
		if bytes.IndexByte(key, '\\') >= 0 { // escaped: unquote it
			var k string
			if err := json.Unmarshal(b[i:end], &k); err != nil {
				return 0, err
			}
			key = []byte(k)
		}
		f := fs.find(key)
		if f == nil {
			return 0, fmt.Errorf("json: unknown field %q", key)
		}
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		if nested := f.nested; nested != nil {
			var err error
			if i, err = checkObject(b, i, nested); err != nil {
				return 0, err
			}
		} else {
			i = skipValue(b, i)
		}
	}
}

// exact returns the field named key, or nil.
func (fs *fields) exact(key []byte) *field {
	for k := range fs.list {
		if string(key) == fs.list[k].name {
			return &fs.list[k]
		}
	}
	return nil
}

// find returns the field named key, matched exactly or else without case,
// or nil.
func (fs *fields) find(key []byte) *field {
	if f := fs.exact(key); f != nil {
		return f
	}
	for k := range fs.list {
		if bytes.EqualFold(key, []byte(fs.list[k].name)) {
			return &fs.list[k]
		}
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index past the string that starts at b[i].
func skipString(b []byte, i int) int {
	for i++; i < len(b); i++ {
		switch b[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index past the value that starts at b[i].
func skipValue(b []byte, i int) int {
	depth := 0
	for i < len(b) {
		switch b[i] {
		case '"':
			i = skipString(b, i)
			if depth == 0 {
				return i
			}
			continue
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i
			}
			depth--
			if depth == 0 {
				return i + 1
			}
		case ',':
			if depth == 0 {
				return i
			}
		}
		i++
	}
	return i
}

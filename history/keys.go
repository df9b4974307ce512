package history

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"time"
)

// fields are the JSON names of a struct type's fields, as encoding/json
// names them (no attribute type embeds a struct), with those of the fields
// that are structs themselves (Failure), which are checked in turn.
type fields struct {
	names  []string
	nested []*fields // by name; nil for a field that is not a struct
}

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
		var nested *fields
		switch ft := f.Type; {
		case ft == timeType, ft == rawJSONType:
		case ft.Kind() == reflect.Struct:
			nested = jsonFields(ft)
		case ft.Kind() == reflect.String, ft.Kind() == reflect.Int, ft.Kind() == reflect.Int64, ft.Kind() == reflect.Bool:
		default:
			panic(fmt.Sprintf("history: field %s of %s is a %s, whose keys knownKeys cannot check: teach it, or use a string, number, json.RawMessage or struct", f.Name, t, ft))
		}
		fs.names, fs.nested = append(fs.names, name), append(fs.nested, nested)
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
		k := fs.find(key)
		if k < 0 {
			return 0, fmt.Errorf("json: unknown field %q", key)
		}
		i = skipSpace(b, skipSpace(b, end)+1) // past the colon
		if nested := fs.nested[k]; nested != nil {
			var err error
			if i, err = checkObject(b, i, nested); err != nil {
				return 0, err
			}
		} else {
			i = skipValue(b, i)
		}
	}
}

// find returns the index of the field named key, or -1.
func (fs *fields) find(key []byte) int {
	for k, f := range fs.names {
		if string(key) == f {
			return k
		}
	}
	for k, f := range fs.names {
		if bytes.EqualFold(key, []byte(f)) {
			return k
		}
	}
	return -1
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

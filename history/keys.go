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
type fields []field

// field is one field of a struct type.
type field struct {
	name   string // its JSON name
	index  int    // its index in the struct
	kind   fieldKind
	nested fields // the fields of a struct field (Failure)
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
func jsonFields(t reflect.Type) fields {
	var fs fields
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
		fs = append(fs, fd)
	}
	return fs
}

// knownKeys returns an error naming the first key of the JSON object b,
// or of an object in it that decodes into a struct, that is no field of
// fs, matched as encoding/json matches them (exactly, or else without
// case); b is valid JSON, as json.Unmarshal found it. A value that is not
// an object (null) has no keys.
func knownKeys(b []byte, fs fields) error {
	s := scanner{b: b}
	if key := s.unknownKey(fs); key != nil {
		return fmt.Errorf("json: unknown field %q", key)
	}
	return nil
}

// unknownKey reads the value at s and returns its first key that is no
// field of fs (see knownKeys), or nil.
func (s *scanner) unknownKey(fs fields) (unknown []byte) {
	if s.peek() != '{' {
		s.skipValue(0)
		return nil
	}
	s.object(func(key []byte) bool {
		switch f := fs.find(key); {
		case f == nil:
			unknown = key
			return false
		case f.kind == kindStruct:
			unknown = s.unknownKey(f.nested)
			return unknown == nil
		}
		return s.skipValue(0)
	})
	return unknown
}

// exact returns the field named key, or nil.
func (fs fields) exact(key []byte) *field {
	for k := range fs {
		if string(key) == fs[k].name {
			return &fs[k]
		}
	}
	return nil
}

// find returns the field named key, matched exactly or else without case,
// or nil.
func (fs fields) find(key []byte) *field {
	if f := fs.exact(key); f != nil {
		return f
	}
	for k := range fs {
		if bytes.EqualFold(key, []byte(fs[k].name)) {
			return &fs[k]
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

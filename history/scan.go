package history

import (
	"encoding/json"
	"reflect"
	"strconv"
	"time"
)

// The fast path of Decode and Import: a scanner that decodes JSON of the
// shapes this package writes straight into the attribute structs, by the
// fields that jsonFields found once per type. It gives up (ok false) on
// anything it is not sure encoding/json would decode the same way (a key that
// matches no field exactly, a number that is not a plain integer, a value of
// the wrong kind), and the encoding/json path then decodes that input with
// its own result and errors. Where it does not give up, it has checked the
// whole input as encoding/json would, and what it decoded is what
// encoding/json decodes. FuzzDecodeMatchesTheStrictDecoder and
// FuzzImportMatchesTheStream hold the two paths equal. On the encoding/json
// path, knownKeys walks the input with the same scanner.

// maxDepth is how deeply nested a value may be before the scanner gives up
// on it: encoding/json's own limit, so that knownKeys walks whatever
// json.Unmarshal accepts.
const maxDepth = 10000

// scanner reads JSON from b, from index i on.
type scanner struct {
	b []byte
	i int
}

// space skips JSON white space.
func (s *scanner) space() { s.i = skipSpace(s.b, s.i) }

// next skips white space and reports whether c comes next, consuming it if
// it does.
func (s *scanner) next(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// peek skips white space and returns the next byte, or 0 at the end.
func (s *scanner) peek() byte {
	s.space()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// end skips white space and reports whether the input is all read.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

// literal consumes lit if it comes next.
func (s *scanner) literal(lit string) bool {
	if len(s.b)-s.i >= len(lit) && string(s.b[s.i:s.i+len(lit)]) == lit {
		s.i += len(lit)
		return true
	}
	return false
}

// object reads an object, handing each key to member, which reads its value.
// The value follows the colon, white space skipped.
func (s *scanner) object(member func(key []byte) bool) bool {
	if !s.next('{') {
		return false
	}
	if s.next('}') {
		return true
	}
	for {
		s.space()
		key, ok := s.key()
		if !ok || !s.next(':') {
			return false
		}
		s.space()
		if !member(key) {
			return false
		}
		if s.next(',') {
			continue
		}
		return s.next('}')
	}
}

// members reads an object whose keys are among names (at most 64), each
// named once, handing each key to read, which reads its value.
func (s *scanner) members(names []string, read func(key string) bool) bool {
	var seen uint64
	return s.object(func(key []byte) bool {
		for k, name := range names {
			if string(key) == name {
				if seen&(1<<k) != 0 {
					return false
				}
				seen |= 1 << k
				return read(name)
			}
		}
		return false
	})
}

// key reads a string and returns its contents, unquoted. The bytes may be
// the input's own: they are valid until the input changes.
func (s *scanner) key() ([]byte, bool) {
	if raw, ok := s.plainString(); ok {
		return raw, true
	}
	str, ok := s.quoted()
	return []byte(str), ok
}

// str reads a string.
func (s *scanner) str() (string, bool) {
	if raw, ok := s.plainString(); ok {
		return string(raw), true
	}
	return s.quoted()
}

// plainString reads a string of printable ASCII without escapes and returns
// its contents; for any other string it returns false, having read nothing.
func (s *scanner) plainString() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			raw := s.b[s.i+1 : j]
			s.i = j + 1
			return raw, true
		case c == '\\', c < 0x20, c >= 0x80:
			return nil, false
		}
	}
	return nil, false
}

// quoted reads a string with escapes or bytes past ASCII, unquoted by
// encoding/json so that escapes and invalid UTF-8 come out as it makes
// them.
func (s *scanner) quoted() (string, bool) {
	start := s.i
	if !s.skipString() {
		return "", false
	}
	var str string
	if json.Unmarshal(s.b[start:s.i], &str) != nil {
		return "", false
	}
	return str, true
}

// skipString skips a string, checking it as JSON.
func (s *scanner) skipString() bool {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return false
	}
	for j := s.i + 1; j < len(s.b); j++ {
		switch c := s.b[j]; {
		case c == '"':
			s.i = j + 1
			return true
		case c < 0x20:
			return false
		case c == '\\':
			j++
			if j >= len(s.b) {
				return false
			}
			switch s.b[j] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if len(s.b)-j <= 4 {
					return false
				}
				for _, h := range s.b[j+1 : j+5] {
					if !isHex(h) {
						return false
					}
				}
				j += 4
			default:
				return false
			}
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// digits skips the digits at s.i and reports whether there was one.
func (s *scanner) digits() bool {
	start := s.i
	for s.i < len(s.b) && isDigit(s.b[s.i]) {
		s.i++
	}
	return s.i > start
}

// integer skips an optional minus and an integer part as JSON writes it: 0,
// or digits that do not start with 0.
func (s *scanner) integer() bool {
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	if s.i < len(s.b) && s.b[s.i] == '0' {
		s.i++
		return true
	}
	return s.digits()
}

// int reads a number that is a plain integer within 64 bits.
func (s *scanner) int() (int64, bool) {
	start := s.i
	if !s.integer() {
		return 0, false
	}
	if s.i < len(s.b) {
		if c := s.b[s.i]; c == '.' || c == 'e' || c == 'E' {
			return 0, false // encoding/json refuses these for an integer field
		}
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	return n, err == nil
}

// skipNumber skips a number, checking it as JSON.
func (s *scanner) skipNumber() bool {
	if !s.integer() {
		return false
	}
	if s.i < len(s.b) && s.b[s.i] == '.' {
		s.i++
		if !s.digits() {
			return false
		}
	}
	if s.i < len(s.b) && (s.b[s.i] == 'e' || s.b[s.i] == 'E') {
		s.i++
		if s.i < len(s.b) && (s.b[s.i] == '+' || s.b[s.i] == '-') {
			s.i++
		}
		if !s.digits() {
			return false
		}
	}
	return true
}

// skipValue skips any value, checking it as JSON.
func (s *scanner) skipValue(depth int) bool {
	if depth > maxDepth || s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '{':
		return s.object(func([]byte) bool { return s.skipValue(depth + 1) })
	case '[':
		s.i++
		if s.next(']') {
			return true
		}
		for {
			s.space()
			if !s.skipValue(depth + 1) {
				return false
			}
			if !s.next(',') {
				return s.next(']')
			}
		}
	case '"':
		return s.skipString()
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		return s.skipNumber()
	}
}

// raw skips a value and returns its bytes, which are the input's own.
func (s *scanner) raw() ([]byte, bool) {
	start := s.i
	if !s.skipValue(0) {
		return nil, false
	}
	return s.b[start:s.i], true
}

// decodeFast decodes b, the attributes of a type with fields fs, into the
// struct v.
func decodeFast(b []byte, fs fields, v reflect.Value) bool {
	s := scanner{b: b}
	return s.peek() == '{' && s.into(fs, v) && s.end()
}

// into reads an object into the struct v, whose fields are fs. A key named
// twice is decoded twice, the second over the first, as encoding/json does.
func (s *scanner) into(fs fields, v reflect.Value) bool {
	return s.object(func(key []byte) bool {
		f := fs.exact(key)
		return f != nil && s.fieldValue(f, v.Field(f.index))
	})
}

// fieldValue reads the value of field f into v.
func (s *scanner) fieldValue(f *field, v reflect.Value) bool {
	if s.literal("null") {
		if f.kind == kindRaw { // a json.RawMessage keeps a null
			v.SetBytes([]byte("null"))
		}
		return true // anything else is left as it was
	}
	switch f.kind {
	case kindString:
		str, ok := s.str()
		v.SetString(str)
		return ok
	case kindInt:
		n, ok := s.int()
		if !ok || v.OverflowInt(n) {
			return false
		}
		v.SetInt(n)
		return true
	case kindBool:
		switch {
		case s.literal("true"):
			v.SetBool(true)
		case s.literal("false"):
			v.SetBool(false)
		default:
			return false
		}
		return true
	case kindRaw:
		raw, ok := s.raw()
		v.SetBytes(append([]byte(nil), raw...))
		return ok
	case kindTime:
		start := s.i
		return s.skipString() && v.Addr().Interface().(*time.Time).UnmarshalJSON(s.b[start:s.i]) == nil
	case kindStruct:
		return s.peek() == '{' && s.into(f.nested, v)
	}
	return false
}

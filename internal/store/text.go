package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/durable-go/durable/history"
)

// ErrUnstorable is returned for a write the database refuses for what it
// holds, not for the state it is in: PostgreSQL's data exceptions (SQLSTATE
// class 22), and payloads a store refuses before writing (CheckPayload).
// Retrying the same write cannot succeed.
var ErrUnstorable = errors.New("the database cannot store this value")

// EscapeText returns s as text a store can hold: PostgreSQL's text and jsonb
// hold only valid UTF-8 without NUL. Each NUL byte, and each byte that is
// not part of valid UTF-8, becomes the four characters \xNN (its value in
// hex: \x00, \xff); everything else stays as it is, so valid text without
// NUL comes back unchanged. It is applied to the free texts that reach the
// database (error messages, stacks, cancel and terminate reasons), so that a
// failure is recorded whatever its message holds; identifiers and names are
// refused instead, before anything is written.
func EscapeText(s string) string { return history.EscapeText(s) }

// EscapeFailure returns f with its texts escaped (EscapeText).
func EscapeFailure(f history.Failure) history.Failure {
	f.Message, f.Class, f.Stack = EscapeText(f.Message), EscapeText(f.Class), EscapeText(f.Stack)
	return f
}

// nulEscape is how JSON writes a NUL character, which PostgreSQL's jsonb
// refuses (SQLSTATE 22P05).
var nulEscape = []byte(`\u0000`)

// CheckPayload returns an error wrapping ErrUnstorable if the JSON b cannot
// be stored in jsonb: a string in it holds a NUL character (\u0000), or its
// bytes are not valid UTF-8. A payload is user data, so it is refused rather
// than changed: escaping would hand the workflow back something else.
func CheckPayload(b []byte) error {
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: it is not valid UTF-8, which PostgreSQL jsonb requires", ErrUnstorable)
	}
	if bytes.IndexByte(b, 0) >= 0 || hasNULEscape(b) {
		return fmt.Errorf("%w: a string in it holds a NUL character (\\u0000), which PostgreSQL jsonb cannot hold: leave it out, or send the bytes encoded (base64, as []byte is)", ErrUnstorable)
	}
	return nil
}

// hasNULEscape says whether the JSON b has the escape \u0000 (and not an
// escaped backslash followed by the text u0000).
func hasNULEscape(b []byte) bool {
	if !bytes.Contains(b, nulEscape) {
		return false
	}
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' {
			continue
		}
		if bytes.HasPrefix(b[i:], nulEscape) {
			return true
		}
		i++ // the escaped character: a backslash escapes nothing after it
	}
	return false
}

// EscapeEvent returns a with its free texts escaped (EscapeText): the
// failure of a failed workflow, activity or child, and the reason of a
// cancel or terminate. PostgreSQL holds neither a NUL byte nor invalid
// UTF-8, and an error message may hold either; unescaped, the write that
// records the failure would be refused on every attempt. Every store
// escapes them alike, so that a workflow that runs on one runs on another.
func EscapeEvent(a history.Attributes) history.Attributes {
	switch v := a.(type) {
	case history.WorkflowFailed:
		v.Failure = EscapeFailure(v.Failure)
		return v
	case history.ActivityFailed:
		v.Failure = EscapeFailure(v.Failure)
		return v
	case history.ChildWorkflowFailed:
		v.Failure = EscapeFailure(v.Failure)
		return v
	case history.WorkflowCancelRequested:
		v.Reason = EscapeText(v.Reason)
		return v
	case history.WorkflowCanceled:
		v.Reason = EscapeText(v.Reason)
		return v
	case history.WorkflowTerminated:
		v.Reason = EscapeText(v.Reason)
		return v
	}
	return a
}

// EncodeEvent returns the JSON attributes of a with its texts escaped
// (EscapeEvent). An event that still cannot be stored, a payload or a name
// in it with a NUL character, is refused with an error that names the event
// and the field and wraps ErrUnstorable: nothing is written.
func EncodeEvent(a history.Attributes) ([]byte, error) {
	a = EscapeEvent(a)
	b, err := history.Encode(a)
	if err != nil {
		return nil, err
	}
	if err := CheckPayload(b); err != nil {
		return nil, fmt.Errorf("%s event%s: %w", a.EventType(), unstorableField(a), err)
	}
	return b, nil
}

// unstorableField names the field of a whose JSON cannot be stored, as
// ` field "input"`, or returns "" if no one field is to blame. It runs only
// for an event that is refused.
func unstorableField(a history.Attributes) string {
	v := reflect.ValueOf(a)
	if v.Kind() != reflect.Struct {
		return ""
	}
	for i := range v.NumField() {
		b, err := json.Marshal(v.Field(i).Interface())
		if err == nil && CheckPayload(b) != nil {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return fmt.Sprintf(" field %q", name)
		}
	}
	return ""
}

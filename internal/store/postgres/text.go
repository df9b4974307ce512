package postgres

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// escapeEvent returns a with its free texts escaped (store.EscapeText): the
// failure of a failed workflow, activity or child, and the reason of a
// cancel or terminate. PostgreSQL holds neither a NUL byte nor invalid
// UTF-8, and an error message may hold either; unescaped, the write that
// records the failure would be refused on every attempt.
func escapeEvent(a history.Attributes) history.Attributes {
	switch v := a.(type) {
	case history.WorkflowFailed:
		v.Failure = store.EscapeFailure(v.Failure)
		return v
	case history.ActivityFailed:
		v.Failure = store.EscapeFailure(v.Failure)
		return v
	case history.ChildWorkflowFailed:
		v.Failure = store.EscapeFailure(v.Failure)
		return v
	case history.WorkflowCancelRequested:
		v.Reason = store.EscapeText(v.Reason)
		return v
	case history.WorkflowCanceled:
		v.Reason = store.EscapeText(v.Reason)
		return v
	case history.WorkflowTerminated:
		v.Reason = store.EscapeText(v.Reason)
		return v
	}
	return a
}

// encodeEvent returns the JSON attributes of a with its texts escaped
// (escapeEvent). An event that still cannot be stored, a payload or a name
// in it with a NUL character, is refused with an error that names the event
// and the field and wraps store.ErrUnstorable: nothing is written.
func encodeEvent(a history.Attributes) ([]byte, error) {
	a = escapeEvent(a)
	b, err := history.Encode(a)
	if err != nil {
		return nil, err
	}
	if err := store.CheckPayload(b); err != nil {
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
		if err == nil && store.CheckPayload(b) != nil {
			name, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
			return fmt.Sprintf(" field %q", name)
		}
	}
	return ""
}

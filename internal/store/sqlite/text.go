package sqlite

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// SQLite holds any text and any JSON text, but the Postgres store cannot
// (see store.ErrUnstorable): this store escapes and refuses what that one
// does, so that a workflow that runs on one runs on the other. Free texts
// (error messages, stacks, reasons) are escaped with store.EscapeText;
// payloads are refused with store.CheckPayload; identifiers and names are
// refused before anything is written (checkText); run IDs must be UUIDs, as
// Postgres's uuid column requires (checkRunID).

// escapeEvent returns a with its free texts escaped (store.EscapeText): the
// failure of a failed workflow, activity or child, and the reason of a
// cancel or terminate.
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
func encodeEvent(a history.Attributes) (string, error) {
	a = escapeEvent(a)
	b, err := history.Encode(a)
	if err != nil {
		return "", err
	}
	if err := store.CheckPayload(b); err != nil {
		return "", fmt.Errorf("%s event%s: %w", a.EventType(), unstorableField(a), err)
	}
	return string(b), nil
}

// encodeEvents encodes each of events (encodeEvent).
func encodeEvents(events []history.Attributes) ([]string, error) {
	attrs := make([]string, len(events))
	for i, e := range events {
		b, err := encodeEvent(e)
		if err != nil {
			return nil, err
		}
		attrs[i] = b
	}
	return attrs, nil
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

// checkPayload refuses a payload (user JSON) that Postgres's jsonb cannot
// hold (store.CheckPayload), saying which.
func checkPayload(what string, b json.RawMessage) error {
	if err := store.CheckPayload(b); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// checkText refuses an identifier or name that Postgres's text cannot hold:
// one with a NUL byte or bytes that are not UTF-8. Pairs are what the text
// is ("workflow ID") and the text.
func checkText(pairs ...string) error {
	for i := 0; i+1 < len(pairs); i += 2 {
		what, s := pairs[i], pairs[i+1]
		switch {
		case !utf8.ValidString(s):
			return fmt.Errorf("%s %q: %w: it is not valid UTF-8, which PostgreSQL text requires", what, s, store.ErrUnstorable)
		case strings.IndexByte(s, 0) >= 0:
			return fmt.Errorf("%s %q: %w: it holds a NUL character, which PostgreSQL text cannot hold", what, s, store.ErrUnstorable)
		}
	}
	return nil
}

// checkRunID refuses a run ID that is not a UUID, as Postgres's uuid column
// does.
func checkRunID(runID string) error {
	if _, err := uuid.Parse(runID); err != nil {
		return fmt.Errorf("run ID %q: %w: it is not a UUID (%v)", runID, store.ErrUnstorable, err)
	}
	return nil
}

// checkActivities refuses activity tasks whose names or payloads cannot be
// stored.
func checkActivities(acts []store.NewActivityTask) error {
	for _, a := range acts {
		if err := checkText("activity", a.Activity, "activity queue", a.Queue, "idempotency key", a.IdempotencyKey,
			"worker ID", a.ClaimAs); err != nil {
			return err
		}
		if err := checkPayload(fmt.Sprintf("input of activity %s (seq %d)", a.Activity, a.Seq), a.Input); err != nil {
			return err
		}
		if err := checkPayload(fmt.Sprintf("options of activity %s (seq %d)", a.Activity, a.Seq), a.Options); err != nil {
			return err
		}
	}
	return nil
}

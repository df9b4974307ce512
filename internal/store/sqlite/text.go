package sqlite

import (
	"encoding/json"
	"fmt"
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

// encodeEvent is store.EncodeEvent as the text this store keeps.
func encodeEvent(a history.Attributes) (string, error) {
	b, err := store.EncodeEvent(a)
	return string(b), err
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

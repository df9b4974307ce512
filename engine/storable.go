package engine

import (
	"context"
	"fmt"

	"github.com/durable-go/durable/internal/store"
)

// maxReasonLen is the longest cancel or terminate reason accepted, in
// bytes, as for a workflow ID.
const maxReasonLen = maxIDLen

// checkReason validates a cancel or terminate reason and returns it as it
// is recorded: a NUL byte or invalid UTF-8 in it escaped
// (store.EscapeText), so that the request is recorded whatever it says.
func checkReason(reason string) (string, error) {
	if len(reason) > maxReasonLen {
		return "", fmt.Errorf("reason is %d bytes, the limit is %d: shorten it", len(reason), maxReasonLen)
	}
	return store.EscapeText(reason), nil
}

// The Postgres store escapes the texts it writes (store.EscapeText): the
// failures and reasons in events, activity errors, terminate reasons. Two
// of its writes take texts as they are, and get them escaped here: a
// commit's closing failure, which it also writes to the run and to a dead
// letter, and a failed workflow task's error.

// CommitWorkflowTask escapes the failure that closes the run, if any, then
// commits. in, which the engine keeps, is not changed.
func (s pgStorage) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	if c := in.Close; c != nil && c.Failure != nil {
		f := store.EscapeFailure(*c.Failure)
		closed := *c
		closed.Failure = &f
		in.Close = &closed
	}
	return s.Store.CommitWorkflowTask(ctx, in)
}

// FailWorkflowTask escapes the task's error (a panic value may hold a NUL
// byte), then records it.
func (s pgStorage) FailWorkflowTask(ctx context.Context, in store.FailWorkflowTaskParams) error {
	in.Error = store.EscapeText(in.Error)
	return s.Store.FailWorkflowTask(ctx, in)
}

package store

import (
	"context"
	"errors"

	"github.com/durable-go/durable/history"
)

// What every store decides alike, written once.

// RedriveCut returns where the redrive of a failed run cuts its history
// (RedriveDeadLetter): the new run keeps the events before cut. It cuts at
// the workflow's failure; or at the activity failure it followed, returned
// as failed, if the workflow scheduled nothing after that failure (it gave
// up there): that activity is scheduled again. An activity failure the
// workflow handled and moved past is history: what came after it must not
// run again.
func RedriveCut(events []history.Event) (cut int64, failed *history.ActivityFailed) {
	cut = int64(len(events)) + 1
	for i := len(events) - 1; i >= 0; i-- {
		switch a := events[i].Attributes.(type) {
		case history.WorkflowFailed:
			cut = events[i].ID
		case history.ActivityFailed:
			return events[i].ID, &a
		case history.ActivityScheduled, history.TimerStarted:
			return cut, nil
		}
	}
	return cut, nil
}

// NoOpenRun tells ErrRunClosed (workflowID has only closed runs) from
// ErrNotFound (it has none), for a write that found no open run of it.
func NoOpenRun(ctx context.Context, s interface {
	GetRunByWorkflowID(ctx context.Context, workflowID string) (Run, error)
}, workflowID string) error {
	_, err := s.GetRunByWorkflowID(ctx, workflowID)
	if errors.Is(err, ErrNotFound) {
		return ErrNotFound
	}
	if err != nil {
		return err
	}
	return ErrRunClosed
}

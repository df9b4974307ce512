package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

var (
	// ErrDeadLetterNotFound is returned for a dead-letter ID that names none.
	ErrDeadLetterNotFound = errors.New("dead letter not found")
	// ErrRedriveConflict is returned, wrapped, by Redrive for a dead letter
	// that cannot be redriven now: a job whose idempotency key a pending
	// job holds, or a workflow whose ID has an open run. Nothing is done and
	// the dead letter stays pending: redrive it again once that job or run
	// has finished.
	ErrRedriveConflict = errors.New("not redriven")
)

// DeadLetter is a standalone job or a workflow run that failed for good,
// with what it takes to understand and redrive it.
type DeadLetter struct {
	ID   int64
	Kind DeadLetterKind
	// Type is the activity or workflow type.
	Type  string
	Queue string
	// Payload is the job's or the run's input.
	Payload        json.RawMessage
	IdempotencyKey string // jobs
	RunID          string // workflows
	WorkflowID     string // workflows
	Attempts       int
	LastError      string
	// ErrorClass is the last error's kind (see activity.ErrorClass).
	ErrorClass     string
	FirstFailedAt  time.Time
	DeadLetteredAt time.Time
	// RedrivenAt is when it was redriven, or nil.
	RedrivenAt *time.Time
	// RedriveRunID is the run a redriven workflow continues in.
	RedriveRunID string
}

// DeadLetterFilter selects dead letters; zero fields match everything.
type DeadLetterFilter struct {
	Kind DeadLetterKind
	Type string
	// Pending keeps those not redriven yet.
	Pending bool
	// BeforeID keeps those with IDs below it, to page newest first: pass
	// the last ID of one page to get the next. 0 means no bound.
	BeforeID int64
	// Limit is the most returned, newest first. Default 100.
	Limit int
}

func deadLetter(d store.DeadLetter) DeadLetter {
	return DeadLetter{
		ID: d.ID, Kind: DeadLetterKind(d.Kind), Type: d.Type, Queue: d.Queue, Payload: d.Payload, IdempotencyKey: d.IdempotencyKey,
		RunID: d.RunID, WorkflowID: d.WorkflowID, Attempts: d.Attempts, LastError: d.LastError, ErrorClass: d.ErrorClass,
		FirstFailedAt: d.FirstFailedAt, DeadLetteredAt: d.DeadLetteredAt, RedrivenAt: d.RedrivenAt, RedriveRunID: d.RedriveRunID,
	}
}

// DeadLetterKind says what a dead letter holds: a job or a workflow run.
type DeadLetterKind string

// Dead-letter kinds. The values are those the database stores and the
// durable CLI's --kind flag takes.
const (
	// DeadJob is a standalone job (Enqueue) that failed for good: a
	// permanent error, its retries spent, or out of time.
	DeadJob DeadLetterKind = "job"
	// DeadWorkflow is a workflow run that failed: its function returned
	// an error. Redriving it continues its history in a new run.
	DeadWorkflow DeadLetterKind = "workflow"
)

// storeFilter is f as the store takes it.
func (f DeadLetterFilter) storeFilter() store.DeadLetterFilter {
	return store.DeadLetterFilter{Kind: string(f.Kind), Type: f.Type, Pending: f.Pending, BeforeID: f.BeforeID, Limit: f.Limit}
}

// DeadLetters lists dead letters, newest first (at most f.Limit, default 100).
func (e *Engine) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	ds, err := e.store.ListDeadLetters(ctx, f.storeFilter())
	if err != nil {
		return nil, err
	}
	out := make([]DeadLetter, len(ds))
	for i, d := range ds {
		out[i] = deadLetter(d)
	}
	return out, nil
}

// DeadLetter returns one dead letter.
func (e *Engine) DeadLetter(ctx context.Context, id int64) (DeadLetter, error) {
	d, err := e.store.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrDeadLetterNotFound)
	}
	return deadLetter(d), err
}

// RedriveResult says what Redrive did.
type RedriveResult struct {
	// Redriven is false when the dead letter had been redriven before;
	// redriving twice is harmless. (A dead letter that cannot be redriven
	// now is an error, ErrRedriveConflict, not Redriven false.)
	Redriven bool
	// RunID is the run a redriven workflow continues in.
	RunID string
}

// Redrive runs a dead letter again, after the fix has shipped. A job runs
// with a fresh attempt budget. A workflow continues in a new run of the same
// workflow ID whose history is the failed run's up to the point of failure:
// the activity that failed runs again, activities that completed do not.
//
// It returns an error wrapping ErrRedriveConflict, and leaves the dead letter
// pending, when the work cannot be queued now: a job whose idempotency key a
// pending job holds (a job with the same JobOptions.Key enqueued since), or a
// workflow whose ID has an open run. The error names that job or run.
func (e *Engine) Redrive(ctx context.Context, id int64) (RedriveResult, error) {
	res, err := e.store.RedriveDeadLetter(ctx, store.RedriveParams{
		ID: id, Now: e.now(), NewRunID: uuid.NewString(),
		Task: func(runID string, a history.ActivityScheduled) (store.NewActivityTask, error) {
			return e.newActivityTask(runID, a, e.now())
		},
	})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return RedriveResult{}, fmt.Errorf("redrive dead letter %d: %w", id, ErrDeadLetterNotFound)
	case errors.Is(err, store.ErrConflict):
		return RedriveResult{}, e.redriveConflict(ctx, id, res, err)
	case err != nil:
		return RedriveResult{}, err
	}
	if e.hub.Active() {
		e.announce(res.Ready)
	} else {
		e.hub.PublishNow(ctx, res.Ready)
	}
	return RedriveResult{Redriven: res.Redriven, RunID: res.RunID}, nil
}

// redriveConflict is the error of a redrive that err, a store.ErrConflict,
// refused: what holds dead letter id back (res names it), and what to do.
func (e *Engine) redriveConflict(ctx context.Context, id int64, res store.RedriveResult, err error) error {
	d, derr := e.store.GetDeadLetter(ctx, id)
	if derr != nil {
		return fmt.Errorf("%w: %w", ErrRedriveConflict, err)
	}
	if d.Kind == store.DeadJob {
		task := "" // it may have finished before the store could name it
		if res.PendingTaskID != 0 {
			task = fmt.Sprintf(" (task %d)", res.PendingTaskID)
		}
		return fmt.Errorf("redrive dead letter %d: %w: job with idempotency key %q is already pending%s: let it finish, then redrive again",
			id, ErrRedriveConflict, d.IdempotencyKey, task)
	}
	run := ""
	if res.OpenRunID != "" {
		run = " " + res.OpenRunID
	}
	return fmt.Errorf("redrive dead letter %d: %w: workflow %q has an open run%s: finish or terminate that run first, then redrive again",
		id, ErrRedriveConflict, d.WorkflowID, run)
}

// RedriveAll redrives every pending dead letter that f selects (f.Limit is
// ignored; f.BeforeID, if set, is where it starts), newest first, and
// returns how many it redrove. It looks at each once: those written while it runs, such as redriven work that failed
// again, wait for the next call.
//
// A dead letter that cannot be redriven now (ErrRedriveConflict) is skipped
// and stays pending; RedriveAll goes on with the others and then returns,
// with the count, an error that wraps ErrRedriveConflict and names each one
// skipped and why. Any other error stops it.
func (e *Engine) RedriveAll(ctx context.Context, f DeadLetterFilter) (int, error) {
	f.Pending, f.Limit = true, 100
	n := 0
	var skipped []error
	for {
		ds, err := e.store.ListDeadLetters(ctx, f.storeFilter())
		if err != nil {
			return n, err
		}
		for _, d := range ds {
			res, err := e.Redrive(ctx, d.ID)
			switch {
			case errors.Is(err, ErrRedriveConflict):
				skipped = append(skipped, err)
			case err != nil:
				return n, err
			case res.Redriven:
				n++
			}
		}
		if len(ds) < f.Limit {
			break
		}
		f.BeforeID = ds[len(ds)-1].ID
	}
	if len(skipped) > 0 {
		return n, fmt.Errorf("redrive all: redrove %d, left %d pending: %w", n, len(skipped), errors.Join(skipped...))
	}
	return n, nil
}

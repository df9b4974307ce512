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

// ErrDeadLetterNotFound is returned for a dead-letter ID that names none.
var ErrDeadLetterNotFound = errors.New("dead letter not found")

// DeadLetter is a standalone job or a workflow run that failed for good,
// with what it takes to understand and redrive it.
type DeadLetter struct {
	ID int64
	// Kind is DeadJob or DeadWorkflow.
	Kind string
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
	Kind string
	Type string
	// Pending keeps those not redriven yet.
	Pending bool
	// Limit is the most returned, newest first. Default 100.
	Limit int
}

func deadLetter(d store.DeadLetter) DeadLetter {
	return DeadLetter{
		ID: d.ID, Kind: d.Kind, Type: d.Type, Queue: d.Queue, Payload: d.Payload, IdempotencyKey: d.IdempotencyKey,
		RunID: d.RunID, WorkflowID: d.WorkflowID, Attempts: d.Attempts, LastError: d.LastError, ErrorClass: d.ErrorClass,
		FirstFailedAt: d.FirstFailedAt, DeadLetteredAt: d.DeadLetteredAt, RedrivenAt: d.RedrivenAt, RedriveRunID: d.RedriveRunID,
	}
}

// Dead-letter kinds.
const (
	DeadJob      = store.DeadJob
	DeadWorkflow = store.DeadWorkflow
)

// DeadLetters lists dead letters, newest first (at most f.Limit, default 100).
func (e *Engine) DeadLetters(ctx context.Context, f DeadLetterFilter) ([]DeadLetter, error) {
	if err := e.needDB(); err != nil {
		return nil, err
	}
	ds, err := e.store.ListDeadLetters(ctx, store.DeadLetterFilter(f))
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
	if err := e.needDB(); err != nil {
		return DeadLetter{}, err
	}
	d, err := e.store.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return DeadLetter{}, fmt.Errorf("dead letter %d: %w", id, ErrDeadLetterNotFound)
	}
	return deadLetter(d), err
}

// RedriveResult says what Redrive did.
type RedriveResult struct {
	// Redriven is false when the dead letter had been redriven before;
	// redriving twice is harmless.
	Redriven bool
	// RunID is the run a redriven workflow continues in.
	RunID string
}

// Redrive runs a dead letter again, after the fix has shipped. A job runs
// with a fresh attempt budget. A workflow continues in a new run of the same
// workflow ID whose history is the failed run's up to the point of failure:
// the activity that failed runs again, activities that completed do not.
func (e *Engine) Redrive(ctx context.Context, id int64) (RedriveResult, error) {
	if err := e.needDB(); err != nil {
		return RedriveResult{}, err
	}
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
		return RedriveResult{}, fmt.Errorf("%w: finish or terminate it first", err)
	case err != nil:
		return RedriveResult{}, err
	}
	if e.hub.active() {
		e.announce(res.Ready)
	} else {
		e.hub.publishNow(ctx, res.Ready)
	}
	return RedriveResult{Redriven: res.Redriven, RunID: res.RunID}, nil
}

// RedriveAll redrives every pending dead letter that f selects (f.Limit is
// ignored) and returns how many it redrove.
func (e *Engine) RedriveAll(ctx context.Context, f DeadLetterFilter) (int, error) {
	f.Pending, f.Limit = true, 100
	n := 0
	for {
		ds, err := e.store.ListDeadLetters(ctx, store.DeadLetterFilter(f))
		if err != nil {
			return n, err
		}
		page := 0
		for _, d := range ds {
			res, err := e.Redrive(ctx, d.ID)
			if err != nil {
				return n, err
			}
			if res.Redriven {
				page++
			}
		}
		n += page
		if len(ds) < f.Limit || page == 0 {
			return n, nil
		}
	}
}

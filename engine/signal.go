package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/codecstore"
	"github.com/durable-go/durable/workflow"
)

// ErrRunClosed is returned for a signal, cancel or terminate sent to a
// workflow ID whose runs are all closed.
var ErrRunClosed = errors.New("workflow run is closed")

// Signal sends v to the open run of workflowID under name. Signals are
// history events: delivered in the order sent, never lost, whether or not
// the workflow waits for them yet (workflow.GetSignalChannel). A workflow
// ID with no open run is an error: ErrRunNotFound or ErrRunClosed. With
// Options.Codec, a run whose payloads the codec cannot decode (a wrong key)
// is refused with ErrCodecMismatch, and nothing is written.
//
// An error does not always mean that the signal was not delivered: a timeout
// may come after it was recorded, and sending it again then delivers it
// twice. A workflow that must act on a signal once gives each signal an ID
// in its payload and ignores an ID it has seen.
func Signal[T any](ctx context.Context, e *Engine, workflowID, name string, v T) error {
	return sendSignal(ctx, e, e.store, false, workflowID, name, v)
}

func sendSignal(ctx context.Context, e *Engine, s store.Store, inTx bool, workflowID, name string, v any) error {
	if name == "" {
		return fmt.Errorf("signal to workflow %q: empty signal name", workflowID)
	}
	if err := checkName("signal name", name, 200); err != nil {
		return fmt.Errorf("signal workflow %q: %w", workflowID, err)
	}
	if err := checkName("workflow ID", workflowID, maxIDLen); err != nil {
		return fmt.Errorf("signal %q: %w", name, err)
	}
	payload, err := encodePayload(v, e.opts.MaxPayloadBytes, "signal "+name)
	if err != nil {
		return fmt.Errorf("signal workflow %q: %w", workflowID, err)
	}
	return e.sendToRun(ctx, s, inTx, workflowID, history.SignalReceived{Name: name, Payload: payload})
}

// sendToRun appends ev to the open run of workflowID.
func (e *Engine) sendToRun(ctx context.Context, s store.Store, inTx bool, workflowID string, ev history.Attributes) error {
	if err := checkName("workflow ID", workflowID, maxIDLen); err != nil {
		return fmt.Errorf("%s: %w", ev.EventType(), err)
	}
	notify := inTx || !e.hub.Active() // the statement notifies, else announce does
	ready, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: workflowID, Now: e.now(), Notify: notify}, ev)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("%s to workflow %q: %w", ev.EventType(), workflowID, ErrRunNotFound)
	case errors.Is(err, store.ErrRunClosed):
		return fmt.Errorf("%s to workflow %q: %w", ev.EventType(), workflowID, ErrRunClosed)
	case errors.Is(err, codecstore.ErrCodecMismatch):
		return codecMismatch{err}
	case err != nil:
		return err
	}
	if !notify {
		e.announce(ready)
	}
	return nil
}

// SignalWithStart sends v under name to the open run of o.ID, starting a run
// of wf with input in first if there is none, in one transaction. The signal
// is never lost and never starts a second run.
func SignalWithStart[In, Out, T any](ctx context.Context, e *Engine, wf func(workflow.Context, In) (Out, error), in In, o StartOptions, name string, v T) (*Run[Out], error) {
	if o.ID == "" {
		return nil, errors.New("signal with start: StartOptions.ID is required")
	}
	o.RejectIfRunning = false
	var r *Run[Out]
	err := e.store.InTx(ctx, func(s store.Store) error {
		var err error
		if r, err = start[Out](ctx, e, s, true, wf, in, o); err != nil {
			return err
		}
		return sendSignal(ctx, e, s, true, o.ID, name, v)
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Cancel asks the open run of workflowID to cancel. The workflow's pending
// activities and timers fail with workflow.ErrCanceled (running activities
// learn of it at their next heartbeat); the workflow may clean up on a
// workflow.NewDisconnectedContext and, returning a canceled error, ends as
// canceled. The request is recorded in history, with the reason: at most
// 1,000 bytes, a NUL byte or invalid UTF-8 in it escaped (\x00, \xff).
func (e *Engine) Cancel(ctx context.Context, workflowID, reason string) error {
	reason, err := checkReason(reason)
	if err != nil {
		return fmt.Errorf("cancel workflow %q: %w", workflowID, err)
	}
	return e.sendToRun(ctx, e.store, false, workflowID, history.WorkflowCancelRequested{Reason: reason})
}

// Terminate stops the open run of workflowID at once, running no workflow
// code: the run closes as terminated with the reason in its history, and
// its pending activities and timers are dropped. The reason is limited and
// escaped as Cancel's is.
func (e *Engine) Terminate(ctx context.Context, workflowID, reason string) error {
	if err := checkName("workflow ID", workflowID, maxIDLen); err != nil {
		return fmt.Errorf("terminate: %w", err)
	}
	reason, err := checkReason(reason)
	if err != nil {
		return fmt.Errorf("terminate workflow %q: %w", workflowID, err)
	}
	ready, err := e.store.TerminateRun(ctx, store.TerminateParams{WorkflowID: workflowID, Reason: reason, Now: e.now()})
	switch {
	case errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("terminate workflow %q: %w", workflowID, ErrRunNotFound)
	case errors.Is(err, store.ErrRunClosed):
		return fmt.Errorf("terminate workflow %q: %w", workflowID, ErrRunClosed)
	case err != nil:
		return err
	}
	if e.hub.Active() {
		e.announce(ready)
	} else {
		e.hub.PublishNow(ctx, ready) // waiters and parents in other processes
	}
	return nil
}

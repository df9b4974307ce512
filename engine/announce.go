package engine

import (
	"github.com/durable-go/durable/internal/notify"
	"github.com/durable-go/durable/internal/store"
)

// announce wakes the workers that r concerns.
func (e *Engine) announce(r store.Ready) {
	notes := notify.ReadyNotes(r)
	if r.ClosedRun != "" {
		// Only this engine waits for a run it started and nobody else said
		// they wait for (store.Run.Waiter): it learns of the close below.
		if r.Closed == nil || r.CloseWaiter != e.hub.ID {
			notes = append(notes, e.closeNote(r.ClosedRun, r.Closed))
		}
		if r.Closed != nil {
			e.hub.DeliverClose(r.ClosedRun, r.Closed)
		}
	}
	if r.TimerAt != nil {
		notes = append(notes, notify.Timers)
	}
	if len(notes) > 0 {
		e.hub.Publish(notes...)
	}
}

// closeNote is the note of run runID's close, with its outcome c unless
// the codec encrypts payloads (a receiver may have no key): a Result
// waiting in another process then needs no read of the run.
func (e *Engine) closeNote(runID string, c *store.CloseRun) store.Note {
	n := store.Note{Kind: store.NoteClosed, RunID: runID}
	if e.opts.Codec == nil {
		n.Close = c
	}
	return n
}

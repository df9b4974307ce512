package storetest

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// noteWait is how long a case waits for a note it expects: long, since it
// ends as soon as the note comes, and the machine may be busy.
const noteWait = 30 * time.Second

// listener is a Listen running until its case ends.
type listener struct {
	notes chan store.Note
	done  chan error
}

// listen starts a Listen and returns once it listens. The case's cleanup
// ends it and waits for it to return.
func (b *bundle) listen(t *testing.T) *listener {
	t.Helper()
	ctx, cancel := context.WithCancel(b.ctx)
	l := &listener{notes: make(chan store.Note, 1024), done: make(chan error, 1)}
	listening := make(chan struct{})
	go func() {
		l.done <- b.s.Listen(ctx, func() { close(listening) }, func(n store.Note) { l.notes <- n })
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case <-l.done:
		case <-time.After(noteWait):
			t.Error("Listen did not return once its context ended")
		}
	})
	select {
	case <-listening:
	case err := <-l.done:
		l.done <- err // for the cleanup
		require.FailNow(t, "Listen returned before it listened", "%v", err)
	case <-time.After(noteWait):
		require.FailNow(t, "Listen did not start listening", "waited %v", noteWait)
	}
	return l
}

// await returns the notes delivered until every one of want has come.
func (l *listener) await(t *testing.T, want ...store.Note) []store.Note {
	t.Helper()
	var got []store.Note
	deadline := time.After(noteWait)
	for _, w := range want {
		for !containsNote(got, w) {
			select {
			case n := <-l.notes:
				got = append(got, n)
			case err := <-l.done:
				l.done <- err // for the cleanup
				require.FailNow(t, "Listen returned", "%v; got %v, want %v", err, got, want)
			case <-deadline:
				require.FailNow(t, "notes did not come", "got %v, want %v", got, want)
			}
		}
	}
	return got
}

// containsNote reports whether notes has one equal to n.
func containsNote(notes []store.Note, n store.Note) bool {
	return slices.ContainsFunc(notes, func(m store.Note) bool { return reflect.DeepEqual(m, n) })
}

// Notify reaches every engine listening, the sender's own included: each
// kind of note, a close with its outcome.
func testNotesReachEveryListener(t *testing.T, b *bundle) {
	first, second := b.listen(t), b.listen(t)
	notes := []store.Note{
		{Kind: store.NoteWorkflowTasks, Queue: wfQueue},
		{Kind: store.NoteActivityTasks, Queue: actQueue},
		{Kind: store.NoteTimers},
		{Kind: store.NoteClosed, RunID: uuid.NewString()},
		{Kind: store.NoteClosed, RunID: uuid.NewString(), Close: &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"done"`)}},
		{Kind: store.NoteClosed, RunID: uuid.NewString(), Close: &store.CloseRun{
			Status: store.StatusFailed, Failure: &history.Failure{Message: "card declined", Class: "permanent", Attempts: 2},
		}},
	}
	require.NoError(t, b.s.Notify(b.ctx, nil), "no notes")
	require.NoError(t, b.s.Notify(b.ctx, notes))
	for i, l := range []*listener{first, second} {
		got := l.await(t, notes...)
		require.ElementsMatch(t, notes, got, "listener %d: each note, once, and nothing else", i+1)
	}
}

// The writes asked to announce what they made ready (Notify set) do, and
// so do the releases of a worker's claims.
func testWritesAnnounceWhatTheyAreAskedTo(t *testing.T, b *bundle) {
	// Work for the releases, before anyone listens.
	b.runWithActivities(t, "order-1", 1, 0)
	require.Len(t, b.claimActivity(t, "quitter", 10, b.now), 1)
	b.createRun(t, "order-2", "released")
	require.Len(t, b.claimWorkflow(t, "released", "quitter", 10, b.now), 1)
	signaled := b.createRun(t, "order-3", "signaled")
	task := b.claimOneWorkflow(t, "signaled", b.now)
	require.NoError(t, b.commit(store.CommitWorkflowTaskParams{RunID: signaled.RunID, Token: task.Token, ProcessedEventID: 1, Now: b.now}))

	l := b.listen(t)
	_, err := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-4", WorkflowType: "Order", Queue: "started",
		Input: json.RawMessage(`1`), Now: b.now, Notify: true,
	})
	require.NoError(t, err)
	job := b.job("ship-1", `1`)
	job.Queue = "jobs"
	_, _, err = b.s.EnqueueJob(b.ctx, store.EnqueueJobParams{Task: job, Now: b.now, Notify: true})
	require.NoError(t, err)
	_, err = b.s.SignalRun(b.ctx, store.SignalParams{WorkflowID: signaled.WorkflowID, Now: b.now, Notify: true},
		history.SignalReceived{Name: "rush", Payload: json.RawMessage(`{}`)})
	require.NoError(t, err)
	require.NoError(t, b.s.ReleaseWorkflowTasks(b.ctx, store.ReleaseParams{WorkerID: "quitter", Now: b.now}))
	require.NoError(t, b.s.ReleaseActivityTasks(b.ctx, store.ReleaseParams{WorkerID: "quitter", Now: b.now}))

	want := []store.Note{
		{Kind: store.NoteWorkflowTasks, Queue: "started"},
		{Kind: store.NoteActivityTasks, Queue: "jobs"},
		{Kind: store.NoteWorkflowTasks, Queue: "signaled"},
		{Kind: store.NoteWorkflowTasks, Queue: "released"},
		{Kind: store.NoteActivityTasks, Queue: actQueue},
	}
	require.ElementsMatch(t, want, l.await(t, want...))
}

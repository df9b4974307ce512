package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// Result may skip its first read of a run started here only while the
// hub's record of closes covers everything since the start: the LISTEN has
// held since before it, and it is recent. A close seen here hands over its
// outcome; one seen only by notification must be read.
func TestSubscribeSinceTrustsOnlyAnUnbrokenRecord(t *testing.T) {
	t.Parallel()
	h := NewHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.Acquire() // returns once the LISTEN holds
	defer h.Release()
	since := time.Now()

	check := func(runID string, since time.Time, want bool, msg string) *Sub {
		t.Helper()
		s, ok := h.SubscribeSince(runID, since)
		t.Cleanup(s.Close)
		require.Equal(t, want, ok, msg)
		return s
	}
	check("running", since, true, "no close since the start: wait without reading")
	done := &store.CloseRun{Status: store.StatusCompleted}
	h.DeliverClose("closed-here", done)
	s := check("closed-here", since, true, "closed here: the outcome is at hand")
	require.Equal(t, done, <-s.Closed)
	h.dispatch(store.Note{Kind: store.NoteClosed, RunID: "closed-elsewhere"})
	check("closed-elsewhere", since, false, "closed elsewhere: read how")
	check("running", time.Time{}, false, "not started on a running engine")
	check("running", time.Now().Add(-time.Hour), false, "started before the LISTEN held, or too long ago")

	h.mu.Lock()
	h.listening = time.Time{} // the LISTEN dropped: closes elsewhere may be unseen
	h.mu.Unlock()
	check("running", since, false, "after a gap in the LISTEN")
}

// Notifications that arrive while a send is on its way wait for the gap
// after it, and go together: under load, one transaction every gap carries
// them. Here the gap is an hour, so the second send can only be the last
// one, made when the hub stops.
func TestBusySendsWaitForTheGap(t *testing.T) {
	t.Parallel()
	h := NewHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.gap = time.Hour
	var (
		mu      sync.Mutex
		batches [][]string
	)
	queue := func(q string) store.Note { return WorkflowTasks(q) }
	first, release := make(chan struct{}), make(chan struct{})
	h.sent = func(notes []store.Note) {
		var queues []string
		for _, n := range notes {
			queues = append(queues, n.Queue)
		}
		mu.Lock()
		batches = append(batches, slices.Sorted(slices.Values(queues)))
		n := len(batches)
		mu.Unlock()
		if n == 1 {
			close(first)
			<-release
		}
	}
	h.Acquire()
	released := false
	defer func() {
		if !released { // a failed assertion: stop the hub all the same
			h.Release()
		}
	}()
	h.Publish(queue("x1")) // an idle hub sends at once
	<-first
	h.Publish(queue("x2")) // during the first send
	close(release)
	require.Never(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) > 1
	}, 100*time.Millisecond, time.Millisecond, "a busy hub waits for the gap")
	h.Publish(queue("x3"))
	released = true
	h.Release() // the last send
	require.Equal(t, [][]string{{"x1"}, {"x2", "x3"}}, batches)
}

// The last Result to return leaves the hub listening for a while: the next
// one, soon after, finds the LISTEN held (no round trips to start and stop
// it). Then the hub stops by itself, and a Run stops it at once.
func TestHubOutlivesTheLastResultBriefly(t *testing.T) {
	t.Parallel()
	h := NewHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.linger = time.Hour
	s := h.SubscribeRun(t.Context(), "a")
	h.mu.Lock()
	since := h.listening
	h.mu.Unlock()
	require.False(t, since.IsZero(), "listening once subscribeRun returns")
	s.Close()
	require.True(t, h.Active(), "still running after the last Result")

	s = h.SubscribeRun(t.Context(), "b")
	h.mu.Lock()
	require.Equal(t, since, h.listening, "the same LISTEN, not a new one")
	h.mu.Unlock()
	s.Close()

	h.Acquire() // as Run does
	h.Release()
	require.False(t, h.Active(), "Run's release stops it at once")

	h.linger = time.Millisecond
	h.SubscribeRun(t.Context(), "c").Close()
	require.Eventually(t, func() bool { return !h.Active() }, 10*time.Second, time.Millisecond,
		"stopped once no Result came for linger")
	h.life.Lock()
	done := h.done
	h.life.Unlock()
	select {
	case <-done:
	default:
		t.Fatal("the hub's loops still run")
	}
}

// A close note whose outcome comes in a codec's envelope (from an engine
// with a codec) is not delivered: the waiter reads the run.
func TestSealedOutcomeIsNotDelivered(t *testing.T) {
	t.Parallel()
	c := &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`1`)}
	aes, err := codec.AESGCM(bytes.Repeat([]byte{5}, 32))
	require.NoError(t, err)
	h := NewHub(postgres.New(pgtest.Pool(t)), slog.New(slog.DiscardHandler))
	wrapped, err := codec.Wrap(aes, json.RawMessage(`1`))
	require.NoError(t, err)
	for name, n := range map[string]store.Note{
		"sealed": {Kind: store.NoteClosed, RunID: "run-2", Close: &store.CloseRun{Status: store.StatusCompleted, Result: wrapped}},
		"plain":  {Kind: store.NoteClosed, RunID: "run-3", Close: c},
	} {
		sub := h.SubscribeRun(context.Background(), n.RunID)
		h.dispatch(n)
		<-sub.C // woken either way
		select {
		case got := <-sub.Closed:
			require.Equal(t, "plain", name, "%s: delivered %v", name, got)
		default:
			require.Equal(t, "sealed", name, "%s: not delivered", name)
		}
		sub.Close()
	}
}

// notesTo is a store that records what is sent to it.
type notesTo struct {
	store.Store
	mu    sync.Mutex
	notes []store.Note
}

func (s *notesTo) Notify(_ context.Context, notes []store.Note) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, notes...)
	return nil
}

func (s *notesTo) sent() []store.Note {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.notes)
}

// What is published while the hub does not run is sent all the same, at
// once. A client that saw the hub running (lingering after a Result) left
// a start's notification to it; when the hub stopped before the start was
// published, the note waited for a send loop that never came, and the
// workers found the run at their next poll: five seconds (W2 from another
// process, 2026-12-03).
func TestPublishWhileStoppedSendsAtOnce(t *testing.T) {
	t.Parallel()
	s := &notesTo{Store: postgres.New(pgtest.Pool(t))}
	h := NewHub(s, slog.New(slog.DiscardHandler))
	h.Acquire()
	h.Release() // stopped
	require.False(t, h.Active())
	note := store.Note{Kind: store.NoteWorkflowTasks, Queue: "q"}
	h.Publish(note)
	require.Contains(t, s.sent(), note, "sent by Publish itself")
}

package engine

import (
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	h := newHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.acquire() // returns once the LISTEN holds
	defer h.release()
	since := time.Now()

	check := func(runID string, since time.Time, want bool, msg string) *runSub {
		t.Helper()
		s, ok := h.subscribeSince(runID, since)
		t.Cleanup(s.close)
		require.Equal(t, want, ok, msg)
		return s
	}
	check("running", since, true, "no close since the start: wait without reading")
	done := &store.CloseRun{Status: store.StatusCompleted}
	h.deliverClose("closed-here", done)
	s := check("closed-here", since, true, "closed here: the outcome is at hand")
	require.Equal(t, done, <-s.closed)
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
	h := newHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.gap = time.Hour
	var (
		mu      sync.Mutex
		batches [][]string
	)
	queue := func(q string) store.Note { return workflowTasksNote(q) }
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
	h.acquire()
	released := false
	defer func() {
		if !released { // a failed assertion: stop the hub all the same
			h.release()
		}
	}()
	h.publish(queue("x1")) // an idle hub sends at once
	<-first
	h.publish(queue("x2")) // during the first send
	close(release)
	require.Never(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(batches) > 1
	}, 100*time.Millisecond, time.Millisecond, "a busy hub waits for the gap")
	h.publish(queue("x3"))
	released = true
	h.release() // the last send
	require.Equal(t, [][]string{{"x1"}, {"x2", "x3"}}, batches)
}

// The last Result to return leaves the hub listening for a while: the next
// one, soon after, finds the LISTEN held (no round trips to start and stop
// it). Then the hub stops by itself, and a Run stops it at once.
func TestHubOutlivesTheLastResultBriefly(t *testing.T) {
	t.Parallel()
	h := newHub(postgres.New(pgtest.Pool(t)), slog.New(slog.NewTextHandler(io.Discard, nil)))
	h.linger = time.Hour
	s := h.subscribeRun(t.Context(), "a")
	h.mu.Lock()
	since := h.listening
	h.mu.Unlock()
	require.False(t, since.IsZero(), "listening once subscribeRun returns")
	s.close()
	require.True(t, h.active(), "still running after the last Result")

	s = h.subscribeRun(t.Context(), "b")
	h.mu.Lock()
	require.Equal(t, since, h.listening, "the same LISTEN, not a new one")
	h.mu.Unlock()
	s.close()

	h.acquire() // as Run does
	h.release()
	require.False(t, h.active(), "Run's release stops it at once")

	h.linger = time.Millisecond
	h.subscribeRun(t.Context(), "c").close()
	require.Eventually(t, func() bool { return !h.active() }, 10*time.Second, time.Millisecond,
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

package engine

import (
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
)

// Result may skip its first read of a run started here only while the
// hub's record of closes covers everything since the start: the LISTEN has
// held since before it, and it is recent. A close seen here hands over its
// outcome; one seen only by notification must be read.
func TestSubscribeSinceTrustsOnlyAnUnbrokenRecord(t *testing.T) {
	t.Parallel()
	h := newHub(pgtest.Pool(t), slog.New(slog.NewTextHandler(io.Discard, nil)))
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
	h.dispatch("c:closed-elsewhere")
	check("closed-elsewhere", since, false, "closed elsewhere: read how")
	check("running", time.Time{}, false, "not started on a running engine")
	check("running", time.Now().Add(-time.Hour), false, "started before the LISTEN held, or too long ago")

	h.mu.Lock()
	h.listening = time.Time{} // the LISTEN dropped: closes elsewhere may be unseen
	h.mu.Unlock()
	check("running", since, false, "after a gap in the LISTEN")
}

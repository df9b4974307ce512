package backlog

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/store"
)

// The backlog gives its oldest entries, asks every shareEvery-th claim to
// take one of the queue's oldest tasks first, and past maxEntries drops its
// oldest.
func TestBacklogTakeAndBounds(t *testing.T) {
	b := New(nil, nil)
	acts := make([]store.NewActivityTask, maxEntries+2)
	for i := range acts {
		acts[i] = store.NewActivityTask{Seq: int64(i + 1), Queue: "q"}
	}
	b.Push("r", acts)
	keys, share := b.Take("other", 3)
	require.Nil(t, keys)
	require.False(t, share)
	got, _ := b.Take("q", 2)
	require.Equal(t, []store.ActivityKey{{RunID: "r", Seq: 3}, {RunID: "r", Seq: 4}}, got,
		"the oldest two were dropped past maxEntries")
	for i := 2; i < shareEvery; i++ {
		keys, share := b.Take("q", 1)
		require.Len(t, keys, 1, "claim %d", i)
		require.False(t, share, "claim %d", i)
	}
	keys, share = b.Take("q", 1)
	require.Len(t, keys, 1, "claim %d names a task all the same, for when the queue has no other", shareEvery)
	require.True(t, share, "claim %d takes one of the queue's oldest first", shareEvery)
	keys, share = b.Take("q", 1)
	require.Len(t, keys, 1)
	require.False(t, share)
}

// Once the hold of what was pushed on a queue is over, the backlog
// announces the queue, once: what a claim named but did not get is then
// ready for any engine, which must not wait for its backstop poll.
func TestBacklogAnnouncesItsQueueWhenTheHoldEnds(t *testing.T) {
	t.Parallel()
	calls := make(chan string, 10)
	b := New(func(queue string) { calls <- queue }, nil)
	pushed := time.Now()
	b.Push("r", []store.NewActivityTask{{Seq: 1, Queue: "q"}, {Seq: 2, Queue: "q"}})
	select {
	case q := <-calls:
		require.Equal(t, "q", q)
		require.GreaterOrEqual(t, time.Since(pushed), Hold, "not before the hold ends")
	case <-time.After(10 * Hold):
		t.Fatal("the queue was not announced")
	}
	require.Never(t, func() bool { return len(calls) > 0 }, Hold+Hold/2, 10*time.Millisecond,
		"nothing more was pushed: no more announcements")

	// A push while the timer runs is announced by a second timer, after the
	// first: its hold ends later.
	pushed = time.Now()
	b.Push("r", []store.NewActivityTask{{Seq: 3, Queue: "q"}})
	b.Push("r", []store.NewActivityTask{{Seq: 4, Queue: "q"}})
	for want := 1; want <= 2; want++ {
		select {
		case <-calls:
			require.GreaterOrEqual(t, time.Since(pushed), time.Duration(want)*Hold, "announcement %d", want)
		case <-time.After(10 * Hold):
			t.Fatalf("announcement %d did not come", want)
		}
	}
}

// Keys is a copy: changing it leaves the backlog alone.
func TestKeysIsACopy(t *testing.T) {
	b := New(nil, nil)
	b.Push("r", []store.NewActivityTask{{Seq: 1, Queue: "q"}})
	keys := b.Keys("q")
	require.Equal(t, []store.ActivityKey{{RunID: "r", Seq: 1}}, keys)
	keys[0].Seq = 9
	require.Equal(t, []store.ActivityKey{{RunID: "r", Seq: 1}}, b.Keys("q"))
	require.Nil(t, b.Keys("other"))
}

// Push tells of each queue it added to, once, after the entries are in.
func TestPushTellsItsQueues(t *testing.T) {
	var b *Backlog
	var told []string
	b = New(nil, func(queue string) {
		told = append(told, queue)
		require.NotEmpty(t, b.Keys(queue), "the entries are in when %s is told", queue)
	})
	b.Push("r", []store.NewActivityTask{{Seq: 1, Queue: "a"}, {Seq: 2, Queue: "b"}, {Seq: 3, Queue: "a"}})
	require.Equal(t, []string{"a", "b"}, told)
	b.Push("r", nil)
	require.Equal(t, []string{"a", "b"}, told, "an empty push tells nothing")
}

package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A slot given back goes to a task waiting in acquireWithin before the
// poller, which waits to put its claim in (see reslot).
func TestReleasedSlotGoesToAWaiterBeforeThePoller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSemaphore(1)
		require.True(t, p.tryAcquire())
		polled := make(chan struct{})
		go func() { // the poller, as pollLoop waits for a slot
			p.slots <- struct{}{}
			close(polled)
		}()
		synctest.Wait()
		got := make(chan bool)
		go func() { got <- p.acquireWithin(context.Background(), time.Second) }()
		synctest.Wait() // both wait

		p.release()
		require.True(t, <-got, "the waiting task took the slot")
		synctest.Wait()
		select {
		case <-polled:
			t.Fatal("the poller took a slot while the waiting task held the only one")
		default:
		}

		p.release() // no task waits: the poller gets it
		<-polled
		require.False(t, p.hasFree())
	})
}

// acquireWithin gives up after its wait, or when ctx ends, holding nothing.
func TestAcquireWithinGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newSemaphore(1)
		require.True(t, p.tryAcquire())
		began := time.Now()
		require.False(t, p.acquireWithin(context.Background(), 200*time.Millisecond))
		require.Equal(t, 200*time.Millisecond, time.Since(began))

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.False(t, p.acquireWithin(ctx, time.Hour))
		p.release()
		require.True(t, p.hasFree(), "nothing was held by the waits that gave up")
	})
}

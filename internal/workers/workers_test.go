package workers

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"
)

// A slot given back goes to a task waiting in AcquireWithin before the
// poller, which waits to put its claim in (the engine's reslot).
func TestReleasedSlotGoesToAWaiterBeforeThePoller(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewSemaphore(1)
		require.True(t, p.TryAcquire())
		polled := make(chan struct{})
		go func() { // the poller, as pollLoop waits for a slot
			p.Acquire(context.Background())
			close(polled)
		}()
		synctest.Wait()
		got := make(chan bool)
		go func() { got <- p.AcquireWithin(context.Background(), time.Second) }()
		synctest.Wait() // both wait

		p.Release()
		require.True(t, <-got, "the waiting task took the slot")
		synctest.Wait()
		select {
		case <-polled:
			t.Fatal("the poller took a slot while the waiting task held the only one")
		default:
		}

		p.Release() // no task waits: the poller gets it
		<-polled
		require.False(t, p.HasFree())
	})
}

// acquireWithin gives up after its wait, or when ctx ends, holding nothing.
func TestAcquireWithinGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := NewSemaphore(1)
		require.True(t, p.TryAcquire())
		began := time.Now()
		require.False(t, p.AcquireWithin(context.Background(), 200*time.Millisecond))
		require.Equal(t, 200*time.Millisecond, time.Since(began))

		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		require.False(t, p.AcquireWithin(ctx, time.Hour))
		p.Release()
		require.True(t, p.HasFree(), "nothing was held by the waits that gave up")
	})
}

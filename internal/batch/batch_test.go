package batch_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/batch"
)

// recorder is a batch function that notes the batches it ran.
type recorder struct {
	mu      sync.Mutex
	batches [][]int
}

func (r *recorder) run(b []int) {
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
}

func (r *recorder) snap() [][]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]int(nil), r.batches...)
}

func TestAloneWhenIdle(t *testing.T) {
	r := &recorder{}
	b := batch.New(4, r.run)
	b.Run(1)
	require.Equal(t, [][]int{{1}}, r.snap(), "ran at once, on the caller's goroutine")
	require.True(t, b.Idle())
	b.Run(2)
	require.Equal(t, [][]int{{1}, {2}}, r.snap())
}

func TestOverlappingRunTogetherUpToTheSize(t *testing.T) {
	r := &recorder{}
	b := batch.New(2, r.run)
	b.Hold()
	for i := range 5 {
		b.Run(i)
	}
	require.Equal(t, 5, b.Waiting())
	require.Empty(t, r.snap(), "nothing runs while held")
	b.Release()
	require.Eventually(t, b.Idle, 10*time.Second, time.Millisecond)
	require.Equal(t, [][]int{{0, 1}, {2, 3}, {4}}, r.snap())
}

// Every request runs exactly once, however the callers interleave.
func TestEachRequestRunsOnce(t *testing.T) {
	r := &recorder{}
	b := batch.New(8, func(batch []int) {
		time.Sleep(100 * time.Microsecond) // a batch takes a while, so that others overlap it
		r.run(batch)
	})
	var wg sync.WaitGroup
	for i := range 500 {
		wg.Go(func() { b.Run(i) })
	}
	wg.Wait()
	require.Eventually(t, b.Idle, 10*time.Second, time.Millisecond)
	seen := map[int]int{}
	many := 0
	for _, batch := range r.snap() {
		require.LessOrEqual(t, len(batch), 8)
		if len(batch) > 1 {
			many++
		}
		for _, n := range batch {
			seen[n]++
		}
	}
	require.Len(t, seen, 500)
	for n, times := range seen {
		require.Equal(t, 1, times, "request %d", n)
	}
	require.Positive(t, many, "some requests overlapped and went together")
}

// Package benchkit is what the load drivers share, durable's own
// (cmd/durable-bench) and the peer engines' (bench/peers), so that every
// engine is measured the same way: the open loop that starts runs and
// waits for them, the machine's busy CPU, percentiles, and the bench
// database's commit count.
package benchkit

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Loop is what OpenLoop measured.
type Loop struct {
	// Lat is each run's time from its start call to its result.
	Lat []time.Duration
	// Started is from the first start call to the return of the last.
	Started time.Duration
	// Span is from the first start call to the last result.
	Span time.Duration
	// Busy is the machine's busy CPU time over the span.
	Busy time.Duration
}

// StartFunc starts run i and returns a function that waits for its
// result (and checks it, if the caller wants to).
type StartFunc func(ctx context.Context, i int) (wait func(context.Context) error, err error)

// OpenLoop starts n runs (i = 0..n-1) from starters goroutines as fast as
// they go, fed by a channel; each start is followed by a goroutine that
// waits for that run's result. The first error stops it.
func OpenLoop(ctx context.Context, n, starters int, start StartFunc) (Loop, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu          sync.Mutex
		lat         = make([]time.Duration, 0, n)
		lastStarted time.Time
		lastResult  time.Time
		wg          sync.WaitGroup
	)
	next := make(chan int)
	busy0, first := BusyCPU(), time.Now()
	for range starters {
		wg.Go(func() {
			for i := range next {
				t0 := time.Now()
				wait, err := start(ctx, i)
				if err != nil {
					cancel(err)
					continue
				}
				t1 := time.Now()
				mu.Lock()
				lastStarted = later(lastStarted, t1)
				mu.Unlock()
				wg.Go(func() {
					if err := wait(ctx); err != nil {
						cancel(err)
						return
					}
					t2 := time.Now()
					mu.Lock()
					lat = append(lat, t2.Sub(t0))
					lastResult = later(lastResult, t2)
					mu.Unlock()
				})
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	busy := BusyCPU() - busy0
	if err := context.Cause(ctx); err != nil {
		return Loop{}, err
	}
	return Loop{Lat: lat, Started: lastStarted.Sub(first), Span: lastResult.Sub(first), Busy: busy}, nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// BusyCPU returns the machine's busy CPU time so far, from the first line
// of /proc/stat (user, nice, system, irq, softirq and steal, in USER_HZ
// ticks of 10 ms), or 0 where there is no /proc/stat.
func BusyCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	return parseBusy(string(b))
}

func parseBusy(stat string) time.Duration {
	line, _, _ := strings.Cut(stat, "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for _, i := range []int{1, 2, 3, 6, 7, 8} { // not 4 idle, 5 iowait
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0
		}
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

// Quantile returns the nearest-rank q-quantile of sorted: the smallest
// value with at least q of the values at or below it; 0 for none.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(i, 0)]
}

// Querier is the part of a pgx connection or pool Commits uses.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Commits returns the transactions committed in database dbName so far
// (pg_stat_database.xact_commit), asked through q, a connection to another
// database. It first waits, for up to a minute, until no client is
// connected to dbName: a backend flushes its counters when it exits, but
// an idle one may hold them for up to 10 s. So every pool on the database
// must be closed by then.
func Commits(ctx context.Context, q Querier, dbName string) (int64, error) {
	deadline := time.Now().Add(time.Minute)
	for {
		var clients int
		if err := q.QueryRow(ctx, `
			SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND backend_type = 'client backend'`, dbName).Scan(&clients); err != nil {
			return 0, fmt.Errorf("count clients of %s: %w", dbName, err)
		}
		if clients == 0 {
			break
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%d clients still connected to %s after a minute: cannot read its commit count", clients, dbName)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	var n int64
	if err := q.QueryRow(ctx, "SELECT xact_commit FROM pg_stat_database WHERE datname = $1", dbName).Scan(&n); err != nil {
		return 0, fmt.Errorf("read commit count of %s: %w", dbName, err)
	}
	return n, nil
}

// Latency is the median, the 99th and 99.9th percentiles and the maximum
// of a set of durations, in milliseconds, as the load driver and the peer
// benchmarks report them. With under 1,000 durations the p99.9 (nearest
// rank) is the maximum.
type Latency struct {
	P50  float64 `json:"p50_ms"`
	P99  float64 `json:"p99_ms"`
	P999 float64 `json:"p999_ms"`
	Max  float64 `json:"max_ms"`
}

// LatencyOf returns the nearest-rank p50, p99 and p99.9, and the maximum,
// of ds (which it sorts).
func LatencyOf(ds []time.Duration) Latency {
	slices.Sort(ds)
	l := Latency{P50: MS(Quantile(ds, 0.50)), P99: MS(Quantile(ds, 0.99)), P999: MS(Quantile(ds, 0.999))}
	if len(ds) > 0 {
		l.Max = MS(ds[len(ds)-1])
	}
	return l
}

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return Round(float64(d)/float64(time.Millisecond), 3) }

// Round rounds x to digits decimal places.
func Round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

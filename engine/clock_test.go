package engine

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/syncbuf"
	"github.com/durable-go/durable/workflow"
)

// clockWatch counts what a skewed engine's scanner and pollers did.
type clockWatch struct {
	store.Store
	looks     atomic.Int64 // the scanner's looks at the next timer
	fired     atomic.Int64 // timers its fires fired
	actClaims atomic.Int64 // its claims of activity tasks, whatever they found
	actsTaken atomic.Int64 // activity tasks they claimed
}

func (w *clockWatch) NextTimer(ctx context.Context, skip []string) (time.Time, bool, error) {
	at, ok, err := w.Store.NextTimer(ctx, skip)
	w.looks.Add(1)
	return at, ok, err
}

func (w *clockWatch) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	f, tasks, err := w.Store.FireTimers(ctx, in)
	w.fired.Add(int64(f.Count))
	return f, tasks, err
}

func (w *clockWatch) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	tasks, err := w.Store.ClaimActivityTasks(ctx, in)
	w.actsTaken.Add(int64(len(tasks)))
	w.actClaims.Add(1)
	return tasks, err
}

// skewedEngine returns an engine on pool whose process clock is skew
// ahead, watched by w if it is set.
func skewedEngine(t *testing.T, pool *pgxpool.Pool, skew time.Duration, w *clockWatch) *Engine {
	t.Helper()
	o := Options{Logger: slog.New(slog.DiscardHandler), PollInterval: 50 * time.Millisecond,
		osNowFunc: func() time.Time { return time.Now().Add(skew) }}
	var wrap func(store.Store) store.Store
	if w != nil {
		wrap = func(s store.Store) store.Store { w.Store = s; return w }
	}
	e, err := newOnPool(pool, o, wrap)
	require.NoError(t, err)
	return e
}

func napHalfHour(ctx workflow.Context, n int) (int, error) {
	return n, workflow.Sleep(ctx, 30*time.Minute)
}

// A worker whose clock is an hour ahead does not fire a 30-minute timer
// early (#28): timers are due by the database's clock.
func TestSkewedWorkerDoesNotFireTimersEarly(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	right := skewedEngine(t, pool, 0, nil)
	require.NoError(t, RegisterWorkflow(right, napHalfHour, WorkflowOptions{}))
	runUntilTestEnds(t, right)
	r, err := Start(ctx, right, napHalfHour, 1, StartOptions{})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		d, err := right.Describe(ctx, r.WorkflowID)
		return err == nil && len(d.PendingTimers) == 1
	}, 10*time.Second, 5*time.Millisecond, "the run sleeps")

	w := &clockWatch{}
	ahead := skewedEngine(t, pool, time.Hour, w)
	require.NoError(t, RegisterWorkflow(ahead, napHalfHour, WorkflowOptions{}))
	runUntilTestEnds(t, ahead)
	// Each round of the scanner looks at the next timer once; a fire in the
	// first round is over by the third.
	require.Eventually(t, func() bool { return w.looks.Load() >= 3 }, 10*time.Second, time.Millisecond,
		"the skewed engine's scanner looks three times")
	require.Zero(t, w.fired.Load(), "the skewed engine fired a timer that is not due")
	d, err := right.Describe(ctx, r.WorkflowID)
	require.NoError(t, err)
	require.Len(t, d.PendingTimers, 1, "the run still sleeps")
}

// The activity of the lease test: it counts its calls, says it started
// and holds until released.
var (
	leasedCalls   atomic.Int64
	leasedStarted = make(chan struct{}, 1)
	leasedRelease = make(chan struct{})
	leasedOnce    sync.Once
)

func leased(ctx context.Context, n int) (int, error) {
	leasedCalls.Add(1)
	select {
	case leasedStarted <- struct{}{}:
	default:
	}
	select {
	case <-leasedRelease:
		return n + 1, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// leaseSkew is how far ahead the skewed worker's clock is: twice the
// lease of leased, so that a worker's clock would take the live claim at
// once, and the lease is long enough that the claim is still live when the
// skewed worker starts on a loaded machine.
const leaseSkew = 10 * time.Second

func leasedOnceWF(ctx workflow.Context, n int) (int, error) {
	ctx = workflow.WithActivityOptions(ctx, activity.Options{StartToCloseTimeout: leaseSkew / 2})
	return workflow.ExecuteActivity(ctx, leased, n).Get(ctx)
}

// A worker whose clock is 10 seconds ahead does not take a live claim of
// an activity (#28): leases are measured by the database's clock, so the
// activity runs once.
func TestSkewedWorkerDoesNotTakeALiveClaim(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	register := func(e *Engine) {
		require.NoError(t, RegisterWorkflow(e, leasedOnceWF, WorkflowOptions{}))
		require.NoError(t, RegisterActivity(e, leased, activity.Options{}))
	}
	right := skewedEngine(t, pool, 0, nil)
	register(right)
	runUntilTestEnds(t, right)
	defer leasedOnce.Do(func() { close(leasedRelease) })
	r, err := Start(ctx, right, leasedOnceWF, 1, StartOptions{})
	require.NoError(t, err)
	select {
	case <-leasedStarted:
	case <-ctx.Done():
		t.Fatal("the activity did not start")
	}
	began := time.Now()

	w := &clockWatch{}
	ahead := skewedEngine(t, pool, leaseSkew, w)
	register(ahead)
	runUntilTestEnds(t, ahead)
	require.Eventually(t, func() bool { return w.actClaims.Load() >= 1 }, 10*time.Second, time.Millisecond,
		"the skewed engine claims activity tasks")
	require.Less(t, time.Since(began), leaseSkew/2, "the skewed engine claimed while the lease held")
	require.Zero(t, w.actsTaken.Load(), "the skewed engine took the live claim")
	leasedOnce.Do(func() { close(leasedRelease) })
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, got)
	require.Equal(t, int64(1), leasedCalls.Load(), "the activity ran once")
}

// fakeClocks are a database's clock and a process's clock, both fake.
type fakeClocks struct {
	mu      sync.Mutex
	db      time.Time     // the database's clock
	local   time.Time     // the process's clock, wall only
	readRTT time.Duration // how long a read takes
	err     error         // what a read returns
	reads   int
}

func (f *fakeClocks) read(context.Context) (time.Time, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
	f.local = f.local.Add(f.readRTT / 2)
	at := f.db.Add(f.local.Sub(time.Time{}))
	f.local = f.local.Add(f.readRTT / 2)
	return at, f.err
}

func (f *fakeClocks) now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.local
}

// dbNow is the database's clock now.
func (f *fakeClocks) dbNow() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.db.Add(f.local.Sub(time.Time{}))
}

func (f *fakeClocks) readCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.reads
}

func (f *fakeClocks) set(do func(f *fakeClocks)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	do(f)
}

// The database's clock is the engine's, carried forward by the process's
// however far off the process's is; a slow read does not replace a more
// precise reading; the clock goes on when the database does not answer,
// and says so once.
func TestDBClock(t *testing.T) {
	t.Parallel()
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	setup := func(t *testing.T) (*fakeClocks, *dbClock, *syncbuf.Buffer) {
		t.Helper()
		// The database's clock reads start when the process's reads its
		// zero (year 1): far apart.
		f := &fakeClocks{db: start, readRTT: 2 * time.Millisecond}
		log := &syncbuf.Buffer{}
		c, err := newDBClock(context.Background(), f.read, f.now, slog.New(slog.NewTextHandler(log, nil)))
		require.NoError(t, err)
		return f, c, log
	}
	t.Run("DueIsNeverAheadOfTheDatabase", func(t *testing.T) {
		t.Parallel()
		// The worst read for a clock that must not run ahead: the request
		// takes the whole round trip to arrive, and the database reads its
		// clock as it answers, instantly.
		var (
			mu    sync.Mutex
			local time.Time
		)
		const rtt = 40 * time.Millisecond
		dbAt := func(l time.Time) time.Time { return start.Add(l.Sub(time.Time{})) }
		read := func(context.Context) (time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			local = local.Add(rtt)
			return dbAt(local), nil
		}
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return local }
		c, err := newDBClock(context.Background(), read, now, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.True(t, c.now().After(dbAt(now())), "the midpoint estimate runs ahead of this database's clock")
		require.False(t, c.due().After(dbAt(now())), "due is never ahead of it")
		mu.Lock()
		local = local.Add(time.Hour) // past clockResync: due reads again, in the background
		mu.Unlock()
		require.False(t, c.due().After(dbAt(now())), "nor an hour later, drift included")
	})
	t.Run("NowIsNeverBehindTheDatabase", func(t *testing.T) {
		t.Parallel()
		// The worst read for a clock that must not run behind (a timer
		// due at now plus its duration, a lease ending at now plus its
		// length): the database reads its clock at once, and the answer
		// takes the whole round trip to come back, as when the process is
		// paused or starved in between. The chaos rig found engines a
		// second or more behind after such a first read: their timers
		// fired early, their leases ended early.
		var (
			mu    sync.Mutex
			local time.Time
			reads int
		)
		rtt := 4 * time.Second // the first read; the next ones are quick
		dbAt := func(l time.Time) time.Time { return start.Add(l.Sub(time.Time{})) }
		read := func(context.Context) (time.Time, error) {
			mu.Lock()
			defer mu.Unlock()
			reads++
			at := dbAt(local)
			local = local.Add(rtt)
			rtt = time.Millisecond
			return at, nil
		}
		now := func() time.Time { mu.Lock(); defer mu.Unlock(); return local }
		c, err := newDBClock(context.Background(), read, now, slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		require.False(t, c.now().Before(dbAt(now())), "now is never behind the database's clock")
		require.False(t, c.due().After(dbAt(now())), "due is never ahead of it")
		require.Less(t, c.now().Sub(c.due()), 10*time.Millisecond, "a slow first read is followed by quick ones until one is precise")
		require.Greater(t, reads, 1)
	})
	t.Run("DueIsNeverAheadAfterAnImpreciseReading", func(t *testing.T) {
		t.Parallel()
		f, c, _ := setup(t)
		// A slow read (±1 s) is kept while it is the only one; now, at
		// its latest, runs up to 2 s ahead. A precise read then finds the
		// database's clock where it was: now holds still, due does not.
		f.set(func(f *fakeClocks) { f.readRTT = 2 * time.Second })
		c.base.Store(nil)
		require.NoError(t, c.sync(context.Background()))
		ahead := c.now()
		f.set(func(f *fakeClocks) { f.readRTT = 2 * time.Millisecond })
		require.NoError(t, c.sync(context.Background()))
		require.Equal(t, ahead, c.now(), "now never goes back")
		require.False(t, c.due().After(f.dbNow()), "due is never ahead of the database's clock")
	})
	t.Run("CarriesTheDatabasesClockForward", func(t *testing.T) {
		t.Parallel()
		f, c, _ := setup(t)
		// The read's midpoint, carried to its end, plus half the read
		// (the latest the database's clock may be).
		require.Equal(t, start.Add(2*time.Millisecond+time.Millisecond), c.now())
		f.set(func(f *fakeClocks) { f.local = f.local.Add(10 * time.Second) })
		require.Equal(t, start.Add(10*time.Second+2*time.Millisecond+time.Millisecond+10*time.Second/clockDrift), c.now(), "and the drift since")
	})
	t.Run("KeepsTheMorePreciseReading", func(t *testing.T) {
		t.Parallel()
		f, c, _ := setup(t)
		// The database's clock steps 5 s ahead; the read of it takes 2 s,
		// so it is known to ±1 s only.
		f.set(func(f *fakeClocks) { f.db, f.readRTT = f.db.Add(5*time.Second), 2*time.Second })
		require.NoError(t, c.sync(context.Background()))
		require.Equal(t, start.Add(2*time.Second+3*time.Millisecond+2*time.Second/clockDrift), c.now(), "the slow read is not kept")
		f.set(func(f *fakeClocks) { f.readRTT = 2 * time.Millisecond })
		require.NoError(t, c.sync(context.Background()))
		require.Equal(t, start.Add(5*time.Second+2*time.Second+5*time.Millisecond), c.now(), "the precise one is")
	})
	t.Run("NeverGoesBack", func(t *testing.T) {
		t.Parallel()
		f, c, _ := setup(t)
		require.Equal(t, start.Add(3*time.Millisecond), c.now())
		// The database's clock is read a second behind the last reading.
		f.set(func(f *fakeClocks) { f.db = f.db.Add(-time.Second) })
		require.NoError(t, c.sync(context.Background()))
		require.Equal(t, start.Add(3*time.Millisecond), c.now(), "the clock holds still")
		f.set(func(f *fakeClocks) { f.local = f.local.Add(2 * time.Second) })
		require.Equal(t, start.Add(time.Second+5*time.Millisecond+2*time.Second/clockDrift), c.now(), "until the new reading passes it")
	})
	t.Run("GoesOnWithoutTheDatabase", func(t *testing.T) {
		t.Parallel()
		f, c, log := setup(t)
		f.set(func(f *fakeClocks) { f.err = errors.New("connection refused") })
		for i := 1; i <= 2; i++ {
			f.set(func(f *fakeClocks) { f.local = f.local.Add(clockResync) })
			c.now() // starts a read
			require.Eventually(t, func() bool { return !c.syncing.Load() && f.readCount() == 1+i }, 10*time.Second, time.Millisecond,
				"read %d ends", i)
			since := time.Duration(i) * (clockResync + 2*time.Millisecond)
			require.Equal(t, start.Add(since+3*time.Millisecond+since/clockDrift), c.now(), "the clock goes on")
		}
		require.Equal(t, 1, strings.Count(log.String(), "level=WARN"), "one warning for the outage: %s", log.String())
		f.set(func(f *fakeClocks) { f.err = nil; f.local = f.local.Add(clockResync) })
		c.now()
		require.Eventually(t, func() bool { return strings.Contains(log.String(), "read again") }, 10*time.Second, time.Millisecond,
			"the end of the outage is logged")
	})
}

// BenchmarkNow is the engine's clock: the database's, carried forward
// (the default), against time.Now (the default before #28).
func BenchmarkNow(b *testing.B) {
	f := &fakeClocks{db: time.Now()}
	c, err := newDBClock(context.Background(), f.read, time.Now, slog.New(slog.DiscardHandler))
	require.NoError(b, err)
	for _, bb := range []struct {
		name string
		e    *Engine
	}{{"db", &Engine{nowFunc: c.now}}, {"time.Now", &Engine{nowFunc: time.Now}}} {
		b.Run(bb.name, func(b *testing.B) {
			for b.Loop() {
				_ = bb.e.now()
			}
		})
		b.Run(bb.name+"/parallel", func(b *testing.B) {
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_ = bb.e.now()
				}
			})
		})
	}
}

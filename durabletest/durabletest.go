// Package durabletest runs a real engine, on a database of its own, under a
// clock that skips time, for testing workflows.
//
// A workflow that sleeps for a week finishes in milliseconds: whenever no
// task is running or ready, the environment moves its clock to the next
// timer (or retry) and wakes the engine. Everything else is real: the
// workflow is replayed from its Postgres history, activities are claimed and
// retried as in production.
//
//	func TestOnboarding(t *testing.T) {
//		env := durabletest.New(t, durabletest.Options{})
//		engine.RegisterWorkflow(env.Engine, Onboard, engine.WorkflowOptions{})
//		engine.RegisterActivity(env.Engine, ChargeCard, activity.Options{})
//		env.Run()
//		run, _ := engine.Start(ctx, env.Engine, Onboard, in, engine.StartOptions{})
//		res, err := run.Result(ctx)
//	}
//
// Each Env has a database of its own. By default it is a SQLite file in the
// test's temporary directory: nothing to install or run. Options.Store
// (or the environment variable DURABLE_TEST_STORE) set to "postgres" runs
// the Env on PostgreSQL instead: a fresh database cloned from a migrated
// template on DATABASE_URL's server (default
// postgres://postgres@127.0.0.1:5432/postgres), dropped when the test
// passes; Env.Pool is then its pool, for tests that look at the tables.
package durabletest

import (
	"cmp"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// Clock is a settable clock, safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a clock that reads t until moved.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// set moves the clock to t if t is later.
func (c *Clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
}

// Options configure an Env.
type Options struct {
	// Engine are the engine's options. NowFunc is replaced by the Env's
	// clock; a nil Logger discards logs.
	Engine engine.Options
	// Start is the clock's starting time. Default 2030-01-01T00:00:00Z.
	Start time.Time
	// ManualClock turns time skipping off: the clock moves only by
	// Env.Advance.
	ManualClock bool
	// Store is the database the engine runs on: SQLite (a file in the
	// test's temporary directory) or Postgres (a fresh database on
	// DATABASE_URL's server). Default: the environment variable
	// DURABLE_TEST_STORE ("sqlite" or "postgres"), else SQLite.
	Store string
}

// The stores an Env runs on (Options.Store).
const (
	SQLite   = "sqlite"
	Postgres = "postgres"
)

// Env is a test environment: an engine on its own database, and its clock.
type Env struct {
	// Engine is the engine under test. Register workflows and activities on
	// it, then call Run.
	Engine *engine.Engine
	// Pool is the database's pool on Postgres (Options.Store), nil on
	// SQLite.
	Pool *pgxpool.Pool
	// Clock is the engine's clock.
	Clock *Clock

	t      testing.TB
	opts   Options
	queues []string
	store  store.Store // the engine's, for the test clock's wake-ups
}

// New returns an Env whose engine is not running yet. The database is
// dropped in t.Cleanup when the test passes.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	if o.Store == "" {
		o.Store = cmp.Or(os.Getenv("DURABLE_TEST_STORE"), SQLite)
	}
	if o.Start.IsZero() {
		o.Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	clock := NewClock(o.Start)
	eo := o.Engine
	eo.NowFunc = clock.Now
	if eo.Logger == nil {
		eo.Logger = slog.New(slog.DiscardHandler)
	}
	env := &Env{Clock: clock, t: t, opts: o}
	var err error
	switch o.Store {
	case Postgres:
		env.Pool = pgtest.Pool(t)
		env.store = postgres.New(env.Pool)
		env.Engine, err = engine.New(env.Pool, eo)
	case SQLite:
		path := filepath.Join(t.TempDir(), "durable.db")
		env.Engine, err = engine.Open(context.Background(), path, eo)
		if err == nil {
			t.Cleanup(func() { env.Engine.Close() }) // after Run's cleanup: cleanups run last first
			var s *sqlite.Store
			s, err = sqlite.Open(context.Background(), path)
			if err == nil {
				t.Cleanup(func() { s.Close() })
				env.store = s
			}
		}
	default:
		t.Fatalf("durabletest: Options.Store (or DURABLE_TEST_STORE) is %q: use %q or %q", o.Store, SQLite, Postgres)
	}
	if err != nil {
		t.Fatalf("durabletest: %v", err)
	}
	for q := range eo.Queues {
		env.queues = append(env.queues, q)
	}
	if len(env.queues) == 0 {
		env.queues = []string{engine.DefaultQueue}
	}
	return env
}

// Run starts the engine (and, unless ManualClock, the time skipper) in the
// background until the test ends.
func (env *Env) Run() {
	env.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- env.Engine.Run(ctx)
	}()
	if !env.opts.ManualClock {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env.skipTime(ctx)
		}()
	}
	env.t.Cleanup(func() {
		cancel()
		wg.Wait()
		if err := <-errc; err != nil {
			env.t.Errorf("durabletest: engine: %v", err)
		}
	})
}

// Advance moves the clock forward by d and wakes the engine.
func (env *Env) Advance(ctx context.Context, d time.Duration) error {
	env.Clock.Advance(d)
	return env.wake(ctx)
}

// wake tells the engine's timer scanner and pollers that the clock moved.
func (env *Env) wake(ctx context.Context) error {
	notes := []store.Note{{Kind: store.NoteTimers}}
	for _, q := range env.queues {
		notes = append(notes, store.Note{Kind: store.NoteWorkflowTasks, Queue: q}, store.Note{Kind: store.NoteActivityTasks, Queue: q})
	}
	return env.store.Notify(ctx, notes)
}

// skipTime moves the clock to the next due time whenever nothing is
// running or ready, twice in a row a few milliseconds apart.
func (env *Env) skipTime(ctx context.Context) {
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	var last *time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		var next *time.Time
		if at, ok, err := env.store.IdleUntil(ctx, env.Clock.Now()); err == nil && ok {
			next = &at
		}
		if next == nil || last == nil || !next.Equal(*last) {
			last = next
			continue
		}
		last = nil
		env.Clock.set(*next)
		_ = env.wake(ctx) // a failed wake is retried on the next tick
	}
}

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
// The database server comes from DATABASE_URL (default
// postgres://postgres@127.0.0.1:5432/postgres); each Env gets a fresh
// database cloned from a migrated template, dropped when the test passes.
package durabletest

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
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
}

// Env is a test environment: an engine on its own database, and its clock.
type Env struct {
	// Engine is the engine under test. Register workflows and activities on
	// it, then call Run.
	Engine *engine.Engine
	// Pool is the database's pool.
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
	pool := pgtest.Pool(t)
	if o.Start.IsZero() {
		o.Start = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	clock := NewClock(o.Start)
	eo := o.Engine
	eo.NowFunc = clock.Now
	if eo.Logger == nil {
		eo.Logger = slog.New(slog.DiscardHandler)
	}
	e, err := engine.New(pool, eo)
	if err != nil {
		t.Fatalf("durabletest: %v", err)
	}
	env := &Env{Engine: e, Pool: pool, Clock: clock, t: t, opts: o, store: postgres.New(pool)}
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

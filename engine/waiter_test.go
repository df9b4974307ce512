package engine_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

// AwaitGo waits for the signal "go" and returns n plus its value.
func AwaitGo(ctx workflow.Context, n int) (int, error) {
	v, err := workflow.GetSignalChannel[int](ctx, "go").Receive(ctx)
	return n + v, err
}

// A Result in an engine other than the one that started the run says so
// before it waits, and the starter, closing the run, then announces the
// close. The backstop poll is an hour away: only the notification can end
// the wait.
func TestResultInAnotherEngineIsNotifiedOfTheClose(t *testing.T) {
	t.Parallel()
	pool, url := pgtest.PoolURL(t)
	ctx := resultCtx(t)
	worker := newEngine(t, pool, engine.Options{PollInterval: time.Hour})
	require.NoError(t, engine.RegisterWorkflow(worker, AwaitGo, engine.WorkflowOptions{}))
	run(t, worker)
	mine, err := engine.Start(ctx, worker, AwaitGo, 1, engine.StartOptions{ID: "awaited"})
	require.NoError(t, err)

	client := newEngine(t, newPool(t, url), engine.Options{PollInterval: time.Hour})
	theirs, err := engine.GetRun[int](ctx, client, "awaited")
	require.NoError(t, err)
	got := make(chan int, 1)
	go func() {
		v, err := theirs.Result(ctx)
		if err != nil {
			v = -1
		}
		got <- v
	}()
	require.Eventually(t, func() bool {
		var waiter string
		err := pool.QueryRow(ctx, "SELECT coalesce(waiter, '') FROM durable_runs WHERE run_id = $1", mine.RunID).Scan(&waiter)
		return err == nil && waiter == "*"
	}, 10*time.Second, time.Millisecond, "the client says it waits")

	require.NoError(t, engine.Signal(ctx, worker, "awaited", "go", 2))
	select {
	case v := <-got:
		require.Equal(t, 3, v)
	case <-time.After(10 * time.Second):
		t.Fatal("the other engine's Result was not told of the close")
	}
	v, err := mine.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, v, "the starter's own Result")
}

// A run that closes on the engine that started it, with no one else
// waiting, is not announced to other processes: that engine hands the
// outcome to its own waiters.
func TestOwnClosesAreNotAnnounced(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	notes, listening := make(chan store.Note, 1024), make(chan struct{})
	lctx, stop := context.WithCancel(ctx)
	defer stop()
	go func() {
		_ = postgres.New(pool).Listen(lctx, func() { close(listening) }, func(n store.Note) { notes <- n })
	}()
	<-listening

	e := newEngine(t, pool, engine.Options{PollInterval: time.Hour})
	require.NoError(t, engine.RegisterWorkflow(e, Echo, engine.WorkflowOptions{}))
	run(t, e)
	r, err := engine.Start(ctx, e, Echo, "seven", engine.StartOptions{})
	require.NoError(t, err)
	v, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "seven", v)

	// A start on a queue no one here serves is announced after the close
	// would have been: its notification ends what we read.
	_, err = engine.Start(ctx, e, Echo, "eight", engine.StartOptions{Queue: "nobody-here"})
	require.NoError(t, err)
	var seen []store.Note
	for !slices.ContainsFunc(seen, func(n store.Note) bool { return n.Queue == "nobody-here" }) {
		select {
		case n := <-notes:
			seen = append(seen, n)
		case <-ctx.Done():
			t.Fatalf("no note of the start on nobody-here; seen %v", seen)
		}
	}
	for _, n := range seen {
		require.False(t, n.Kind == store.NoteClosed && n.RunID == r.RunID, "notes sent: %v", seen)
	}
}

// Result's backstop, for closes whose notification was lost: the waiters of
// one engine share one statement per PollInterval however many they are,
// and a waiter reads its run only once the backstop finds it closed. The
// runs here close by hand, with no notification at all (as when the
// closing engine dies between its commit and its NOTIFY); each waiter
// once read its own run every PollInterval.
func TestResultBackstopAsksAboutEveryWaitedRunAtOnce(t *testing.T) {
	t.Parallel()
	counter := &statementCounter{}
	pool := countingPool(t, counter)
	ctx := resultCtx(t)

	// A client: it starts runs that nobody runs, and waits for them.
	client := newEngine(t, pool, engine.Options{PollInterval: 20 * time.Millisecond})
	require.NoError(t, engine.RegisterWorkflow(client, AwaitGo, engine.WorkflowOptions{}))
	const n = 30
	var ids []string
	got := make(chan int, n)
	for i := range n {
		r, err := engine.Start(ctx, client, AwaitGo, i, engine.StartOptions{})
		require.NoError(t, err)
		ids = append(ids, r.RunID)
		go func() {
			v, err := r.Result(ctx)
			if err != nil {
				v = -1
			}
			got <- v
		}()
	}
	require.Eventually(t, func() bool { return counter.count(backstopSQL) >= 10 }, 10*time.Second, time.Millisecond,
		"the backstop asks every PollInterval")
	require.LessOrEqual(t, counter.count(runReadSQL), n, "waiters read their runs only before they wait")

	_, err := pool.Exec(ctx, `UPDATE durable_runs SET status = 'completed', result = '7', closed_at = now()
        WHERE run_id = ANY($1::uuid[])`, ids)
	require.NoError(t, err)
	for range n {
		select {
		case v := <-got:
			require.Equal(t, 7, v)
		case <-time.After(10 * time.Second):
			t.Fatal("a Result did not learn of a close whose notification was lost")
		}
	}
}

// Statements told apart by a piece of their SQL.
const (
	backstopSQL = "AS running FROM durable_runs"
	runReadSQL  = "r.status, r.input, r.result, r.failure"
)

// countingPool returns a pool on a database of its own whose statements c
// counts.
func countingPool(t *testing.T, c *statementCounter) *pgxpool.Pool {
	_, url := pgtest.PoolURL(t)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.ConnConfig.Tracer = c
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// statementCounter counts the statements sent through a pool, alone or in
// batches, by their SQL.
type statementCounter struct {
	mu  sync.Mutex
	sql []string
}

func (c *statementCounter) add(sql string) {
	c.mu.Lock()
	c.sql = append(c.sql, sql)
	c.mu.Unlock()
}

// count returns how many statements contained part.
func (c *statementCounter) count(part string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, sql := range c.sql {
		if strings.Contains(sql, part) {
			n++
		}
	}
	return n
}

func (c *statementCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.add(d.SQL)
	return ctx
}

func (c *statementCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *statementCounter) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	return ctx
}

func (c *statementCounter) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	c.add(d.SQL)
}

func (c *statementCounter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// After a gap in the engine's LISTEN, closes made meanwhile may never be
// announced: the engine asks about every waited run as soon as it listens
// again. Here the run closes by hand, with no notification, and then the
// listener's connection is killed; with the backstop poll an hour away,
// only that question can end the wait.
func TestResultLearnsOfClosesAfterTheListenerReconnects(t *testing.T) {
	t.Parallel()
	counter := &statementCounter{}
	pool := countingPool(t, counter)
	ctx := resultCtx(t)
	client := newEngine(t, pool, engine.Options{PollInterval: time.Hour})
	require.NoError(t, engine.RegisterWorkflow(client, AwaitGo, engine.WorkflowOptions{}))
	r, err := engine.Start(ctx, client, AwaitGo, 1, engine.StartOptions{})
	require.NoError(t, err)
	got := make(chan int, 1)
	go func() {
		v, err := r.Result(ctx)
		if err != nil {
			v = -1
		}
		got <- v
	}()
	listener := func() (pid int) {
		err := pool.QueryRow(ctx, `SELECT pid FROM pg_stat_activity
            WHERE datname = current_database() AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid()`).Scan(&pid)
		if err != nil {
			return 0
		}
		return pid
	}
	// The engine asks once when it first listens (for waiters that came
	// before); then the waiter has read its run, and only a close by hand
	// is left for it to miss.
	require.Eventually(t, func() bool {
		return listener() != 0 && counter.count(backstopSQL) > 0 && counter.count(runReadSQL) > 0
	}, 10*time.Second, time.Millisecond, "the waiter's engine listens and has asked once, and the waiter has read its run")

	_, err = pool.Exec(ctx, `UPDATE durable_runs SET status = 'completed', result = '7', closed_at = now() WHERE run_id = $1`, r.RunID)
	require.NoError(t, err)
	select {
	case v := <-got:
		t.Fatalf("Result returned %d before anything could tell it of the close", v)
	case <-time.After(100 * time.Millisecond):
	}
	_, err = pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, listener())
	require.NoError(t, err)
	select {
	case v := <-got:
		require.Equal(t, 7, v)
	case <-time.After(10 * time.Second):
		t.Fatal("Result did not learn of the close once the listener was back")
	}
}

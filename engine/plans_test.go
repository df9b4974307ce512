package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// PlannedFlow touches every kind of task row: two activities (the second
// a fused step), a timer, and a close.
func PlannedFlow(ctx workflow.Context, n int) (int, error) {
	n, err := workflow.ExecuteActivity[int](ctx, Add, n).Get(ctx)
	if err != nil {
		return 0, err
	}
	if err := workflow.Sleep(ctx, 5*time.Millisecond); err != nil {
		return 0, err
	}
	return workflow.ExecuteActivity[int](ctx, Add, n).Get(ctx)
}

// TestPlansMadeOnEmptyTablesHoldAsTheyGrow: the engine's statements keep
// their plans per connection, made once (a generic plan) when a connection
// first runs them, often while the task tables are nearly empty (an engine
// starting on a quiet queue, or statistics taken in a quiet moment). Such
// a plan must still cost what the rows a statement touches cost once the
// tables hold thousands of rows: a plan that walks a table, or an index
// whole, is fast on an empty one and grows with the backlog. The test runs
// workflows on empty tables, adds 5,000 rows to each table that no step
// here touches, runs them again, and has auto_explain report every plan
// node that read more than a few rows of them.
func TestPlansMadeOnEmptyTablesHoldAsTheyGrow(t *testing.T) {
	t.Parallel()
	ctx := resultCtx(t)
	admin, url := pgtest.PoolURL(t)
	_, err := admin.Exec(ctx, `LOAD 'auto_explain'`)
	require.NoError(t, err, "this test reads plans through auto_explain: it needs PostgreSQL's contrib modules and a superuser")
	_, err = admin.Exec(ctx, `VACUUM ANALYZE durable_runs, durable_events, durable_workflow_tasks, durable_activity_tasks, durable_timers`)
	require.NoError(t, err)

	var (
		armed atomic.Bool
		mu    sync.Mutex
		plans []string
	)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 6 // few connections, so that the second round meets the first round's plans
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		if _, plan, ok := strings.Cut(n.Message, "plan:\n"); ok && armed.Load() {
			mu.Lock()
			plans = append(plans, plan)
			mu.Unlock()
		}
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `LOAD 'auto_explain'; SET auto_explain.log_min_duration = 0; SET auto_explain.log_analyze = on;
            SET auto_explain.log_timing = off; SET auto_explain.log_format = json; SET auto_explain.log_level = notice`)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	// One activity slot, so that activities wait in the backlog and are
	// claimed; a client engine that does not run, so that its starts are
	// claimed as workflow tasks.
	e := newEngine(t, pool, engine.Options{Queues: map[string]engine.QueueOptions{"default": {ActivityConcurrency: 1}}})
	client := newEngine(t, pool, engine.Options{})
	for _, x := range []*engine.Engine{e, client} {
		require.NoError(t, engine.RegisterWorkflow(x, PlannedFlow, engine.WorkflowOptions{}))
		require.NoError(t, engine.RegisterActivity(x, Add, activity.Options{}))
	}
	run(t, e)
	round := func(name string) {
		var wg sync.WaitGroup
		for i := range 12 {
			wg.Go(func() {
				from := e
				if i%3 == 0 {
					from = client
				}
				r, err := engine.Start(ctx, from, PlannedFlow, i, engine.StartOptions{ID: fmt.Sprintf("%s-%d", name, i)})
				if !assert.NoError(t, err) {
					return
				}
				got, err := r.Result(ctx)
				if assert.NoError(t, err) {
					assert.Equal(t, i+2, got)
				}
			})
		}
		wg.Wait()
	}
	round("small")

	const rows = 5000
	_, err = admin.Exec(ctx, `
        WITH r AS (
            INSERT INTO durable_runs (run_id, workflow_id, workflow_type, queue, status, input, next_event_id,
                created_at, updated_at)
            SELECT gen_random_uuid(), 'other-' || g, 'Other', 'default', 'running', '0', 2, now(), now()
            FROM generate_series(1, $1::int) g
            RETURNING run_id
        ), ev AS (
            INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
            SELECT run_id, 1, 'workflow_started', '{}', now() FROM r
        ), tm AS (
            INSERT INTO durable_timers (run_id, seq, queue, fire_at) SELECT run_id, 1, 'default', now() + interval '1 day' FROM r
        ), wt AS (
            INSERT INTO durable_workflow_tasks (run_id, queue, run_after, locked_by, locked_until)
            SELECT run_id, 'default', now() + interval '1 hour', 'elsewhere', now() + interval '1 hour' FROM r
        )
        INSERT INTO durable_activity_tasks (run_id, seq, activity, queue, input, idempotency_key, lease_ms, run_after,
            created_at, attempt, locked_by, locked_until)
        SELECT run_id, 2, 'Add', 'default', '0', run_id::text || ':2', 60000, now() + interval '1 hour', now(), 1,
            'elsewhere', now() + interval '1 hour'
        FROM r`, rows)
	require.NoError(t, err)

	armed.Store(true)
	round("large")
	armed.Store(false)

	mu.Lock()
	defer mu.Unlock()
	require.NotEmpty(t, plans, "auto_explain reported the plans")
	tables := map[string]bool{"durable_runs": true, "durable_events": true, "durable_workflow_tasks": true,
		"durable_activity_tasks": true, "durable_timers": true}
	const most = 100 // a step's own rows, with room; walking a table reads thousands
	checked := 0
	for _, p := range plans {
		var top struct {
			Query string          `json:"Query Text"`
			Plan  json.RawMessage `json:"Plan"`
		}
		require.NoError(t, json.Unmarshal([]byte(p), &top), p)
		var walk func(n planNode)
		walk = func(n planNode) {
			if tables[n.Relation] {
				checked++
				read := n.Rows + n.Removed + n.Recheck
				require.LessOrEqual(t, read, float64(most),
					"%s %s read %v rows of %s (of %d no step here touches):\n%s\n%s", n.Type, n.Index, read, n.Relation, rows, top.Query, p)
			}
			for _, c := range n.Plans {
				walk(c)
			}
		}
		var root planNode
		require.NoError(t, json.Unmarshal(top.Plan, &root))
		walk(root)
	}
	require.Greater(t, checked, 100, "plan nodes that read the tables were checked")
}

// planNode is the part of an EXPLAIN (FORMAT JSON) node the test reads:
// per loop, the rows it returned and those its filters removed.
type planNode struct {
	Type     string     `json:"Node Type"`
	Relation string     `json:"Relation Name"`
	Index    string     `json:"Index Name"`
	Rows     float64    `json:"Actual Rows"`
	Removed  float64    `json:"Rows Removed by Filter"`
	Recheck  float64    `json:"Rows Removed by Index Recheck"`
	Plans    []planNode `json:"Plans"`
}

package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
)

// runWorkload runs n workflows of the workload to completion with an
// engine in this process, on a database with the rig's tables.
func runWorkload(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool := pgtest.Pool(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := pool.Exec(ctx, schemaSQL)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	w := &workload{pool: pool, pid: os.Getpid(), log: log, lease: 5 * time.Second}
	e, err := engine.New(pool, engine.Options{Logger: log, PollInterval: time.Second})
	require.NoError(t, err)
	require.NoError(t, w.register(e))
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	for seq := 1; seq <= n; seq++ {
		in := newInput(rand.New(rand.NewPCG(1, uint64(seq))), seq)
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		id := fmt.Sprintf("chaos-%06d", seq)
		_, err = pool.Exec(ctx, `INSERT INTO chaos_workflows (workflow_id, input) VALUES ($1, $2)`, id, raw)
		require.NoError(t, err)
		run, err := engine.Start(ctx, e, w.Flow, in, engine.StartOptions{ID: id})
		require.NoError(t, err)
		for i, v := range in.Signals {
			require.NoError(t, engine.Signal(ctx, e, id, signalName, Signal{Index: i, Value: v}))
		}
		// A signal sent twice counts once.
		require.NoError(t, engine.Signal(ctx, e, id, signalName, Signal{Index: 0, Value: in.Signals[0]}))
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, Expected(in), got)
	}
	return pool
}

func runIDOf(t *testing.T, pool *pgxpool.Pool, seq int) string {
	t.Helper()
	var id string
	require.NoError(t, pool.QueryRow(context.Background(),
		`SELECT run_id::text FROM durable_runs WHERE workflow_id = $1`, fmt.Sprintf("chaos-%06d", seq)).Scan(&id))
	return id
}

// TestCheckPassesCleanWorkload runs the checker over a workload that ran
// without faults: no violations, and the counts add up.
func TestCheckPassesCleanWorkload(t *testing.T) {
	t.Parallel()
	pool := runWorkload(t, 2)
	f, err := check(context.Background(), pool, nil, &workerLogs{}, time.Second)
	require.NoError(t, err)
	require.Empty(t, f.Violations)
	require.Equal(t, 2, f.Workflows)
	require.Equal(t, 2, f.Runs)
	require.Equal(t, 2*7, f.Executions, "5 Work, Beat and Effect per workflow")
	require.Equal(t, 2, f.TimersFired)
	require.Equal(t, 2, f.ExactlyOnceEffects)
	require.Zero(t, f.DuplicateExecutions)
	require.Equal(t, 2, f.SignalsDeliveredTwice, "runWorkload sends each workflow's first signal twice")
}

// TestCheckFindsViolations damages a completed workload in every way the
// checker must notice, one workflow per kind of damage, and expects each
// to be found and counted once.
func TestCheckFindsViolations(t *testing.T) {
	t.Parallel()
	pool := runWorkload(t, 7)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := pool.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}

	// 1: an event disappears from the middle of a history.
	exec(`DELETE FROM durable_events WHERE run_id = $1 AND event_id = 3`, runIDOf(t, pool, 1))
	// 2: an activity completes twice.
	run2 := runIDOf(t, pool, 2)
	exec(`
WITH last AS (SELECT next_event_id AS id FROM durable_runs WHERE run_id = $1),
     done AS (SELECT type, attributes FROM durable_events WHERE run_id = $1 AND type = 'activity_completed' ORDER BY event_id LIMIT 1)
INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
SELECT $1, last.id, done.type, done.attributes, now() FROM last, done`, run2)
	exec(`UPDATE durable_runs SET next_event_id = next_event_id + 1 WHERE run_id = $1`, run2)
	// 3: a run completed with a result its input does not imply.
	exec(`UPDATE durable_runs SET result = jsonb_set(result, '{work}', '0') WHERE run_id = $1`, runIDOf(t, pool, 3))
	// 4: a timer fired before its time, by the database's record.
	exec(`UPDATE chaos_timer_fires SET fired_at = fired_at - interval '1 hour' WHERE run_id = $1`, runIDOf(t, pool, 4))
	// 5: the exactly-once effect applied twice.
	exec(`INSERT INTO chaos_effects (idempotency_key, pid) SELECT idempotency_key, pid FROM chaos_effects WHERE idempotency_key LIKE $1 || ':%'`, runIDOf(t, pool, 5))
	// 6: an activity ran again with nothing to explain it.
	exec(`
INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at, created_at)
SELECT kind, idempotency_key, run_id, workflow_id, attempt + 1, pid, created_at + interval '1 second', created_at + interval '2 seconds'
FROM chaos_ledger WHERE run_id = $1 AND kind = 'work' ORDER BY id LIMIT 1`, runIDOf(t, pool, 6))
	// 7: a task left behind.
	exec(`INSERT INTO durable_workflow_tasks (run_id, queue, run_after) VALUES ($1, 'default', now())`, runIDOf(t, pool, 7))

	f, err := check(ctx, pool, nil, &workerLogs{}, time.Second)
	require.NoError(t, err)
	all := strings.Join(f.Violations, "\n")
	require.Equal(t, 1, f.HistoryGaps, all)
	require.Equal(t, 1, f.DoubleCompletions, all)
	require.Equal(t, 1, f.ReplayFailures, "the doubled completion does not replay: %s", all)
	require.Equal(t, 1, f.Lost, all)
	require.Equal(t, 1, f.EarlyTimerFires, all)
	require.Equal(t, 1, f.ExactlyOnceViolations, all)
	require.Equal(t, 1, f.Unexplained, all)
	require.Equal(t, 1, f.Leftover, all)
	require.Len(t, f.Violations, 8, all)
}

// TestCheckExplainsDuplicates gives the checker the faults and log lines
// that explain a second execution, one at a time.
func TestCheckExplainsDuplicates(t *testing.T) {
	t.Parallel()
	pool := runWorkload(t, 1)
	ctx := context.Background()
	var (
		key          string
		pid, attempt int
		at           time.Time
		taskID       int64
	)
	require.NoError(t, pool.QueryRow(ctx, `
SELECT l.idempotency_key, l.pid, l.attempt, l.created_at, k.task_id
FROM chaos_ledger l JOIN chaos_task_keys k USING (idempotency_key)
WHERE l.kind = 'work' ORDER BY l.id LIMIT 1`).Scan(&key, &pid, &attempt, &at, &taskID))
	_, err := pool.Exec(ctx, `
INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at, created_at)
SELECT kind, idempotency_key, run_id, workflow_id, attempt + 1, pid + 1, created_at + interval '1 second', created_at + interval '2 seconds'
FROM chaos_ledger WHERE idempotency_key = $1`, key)
	require.NoError(t, err)

	logPath := filepath.Join(t.TempDir(), "worker.log")
	line, err := json.Marshal(map[string]any{
		"time": at, "level": "WARN", "msg": "record activity outcome: the claim is no longer ours (a late duplicate); ignored",
		"pid": pid, "task_id": taskID, "attempt": attempt,
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(logPath, append(line, '\n'), 0o644))
	otherLog := filepath.Join(t.TempDir(), "other.log")
	other, err := json.Marshal(map[string]any{
		"time": at, "level": "WARN", "msg": "record activity outcome: the claim is no longer ours (a late duplicate); ignored",
		"pid": pid + 1, "task_id": taskID, "attempt": attempt,
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(otherLog, append(other, '\n'), 0o644))

	for _, tt := range []struct {
		name   string
		faults []Fault
		logs   []string
		want   string // "" for unexplained
	}{
		{name: "nothing", want: ""},
		{name: "kill of its worker", faults: []Fault{{Kind: FaultKill, PID: pid, At: at.Add(10 * time.Millisecond), Until: at.Add(20 * time.Millisecond)}}, want: "kill"},
		{name: "kill of another worker", faults: []Fault{{Kind: FaultKill, PID: pid + 7, At: at.Add(10 * time.Millisecond), Until: at.Add(20 * time.Millisecond)}}, want: ""},
		{name: "kill within a lease after the second ran", faults: []Fault{{Kind: FaultKill, PID: pid, At: at.Add(2500 * time.Millisecond), Until: at.Add(2500 * time.Millisecond)}}, want: "kill"},
		{name: "kill long after", faults: []Fault{{Kind: FaultKill, PID: pid, At: at.Add(5 * time.Second), Until: at.Add(5 * time.Second)}}, want: ""},
		{name: "kill long before", faults: []Fault{{Kind: FaultKill, PID: pid, At: at.Add(-time.Hour), Until: at.Add(-time.Hour)}}, want: ""},
		{name: "pause", faults: []Fault{{Kind: FaultPause, PID: pid, At: at.Add(-time.Second), Until: at.Add(time.Second)}}, want: "pause"},
		{name: "server stop", faults: []Fault{{Kind: FaultStopCrash, At: at.Add(time.Second), Until: at.Add(3 * time.Second)}}, want: "postgres"},
		{name: "refused outcome in its log", logs: []string{logPath}, want: "lease_expiry"},
		{name: "refused outcome of another process", logs: []string{otherLog}, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs, err := readWorkerLogs(tt.logs)
			require.NoError(t, err)
			f, err := check(ctx, pool, tt.faults, logs, time.Second)
			require.NoError(t, err)
			require.Equal(t, 1, f.DuplicateExecutions)
			if tt.want == "" {
				require.Equal(t, 1, f.Unexplained, "nothing should explain it")
				require.Len(t, f.Violations, 1)
				return
			}
			require.Empty(t, f.Violations)
			require.Equal(t, map[string]int{tt.want: 1}, f.Explained)
		})
	}
}

// TestStaleWatchSeesARefusedWriteOnceItsLineIsWhole checks the live watch
// the rig waits on: lines it has read are not read again, a line cut short
// is read once it ends, and only a refused write counts.
func TestStaleWatchSeesARefusedWriteOnceItsLineIsWhole(t *testing.T) {
	dir := t.TempDir()
	paths := []string{filepath.Join(dir, "worker-0.log"), filepath.Join(dir, "worker-1.log")}
	appendLine := func(p, s string) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		require.NoError(t, err)
		_, err = f.WriteString(s)
		require.NoError(t, err)
		require.NoError(t, f.Close())
	}
	s := newStaleWatch(paths)
	look := func() bool {
		s.next = time.Time{} // no wait between looks in the test
		return s.found()
	}
	require.False(t, look(), "no log yet")

	appendLine(paths[0], `{"level":"WARN","msg":"claim failed","pid":1}`+"\n")
	require.False(t, look(), "a warning that is not a refused write")

	refused := `{"level":"WARN","msg":"workflow task lease lost; its commit was refused","pid":2}`
	appendLine(paths[1], refused[:30])
	require.False(t, look(), "half a line")
	require.Equal(t, int64(0), s.off[1], "half a line is read again on the next look")

	appendLine(paths[1], refused[30:]+"\n")
	require.True(t, look(), "the line is whole now")
	require.True(t, s.found(), "once seen, always seen")
}

// TestExplainAttemptOneAgain: attempt 1 may run again as attempt 1 (an
// attempt that ran ahead of its schedule holds no claim), explained by
// the same faults and log lines as any other; any later attempt running
// twice is one claim run twice, which nothing explains.
func TestExplainAttemptOneAgain(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	exec := func(attempt, pid int) execution {
		return execution{kind: "work", key: "run-1:1", attempt: attempt, pid: pid, started: at, createdAt: at.Add(time.Millisecond)}
	}
	dropped := filepath.Join(t.TempDir(), "worker.log")
	line, err := json.Marshal(map[string]any{
		"time": at, "level": "WARN", "pid": 7, "attempt": 1, "idempotency_key": "run-1:1",
		"msg": "activity ran ahead of its schedule, which did not commit: its outcome is dropped; it runs again with its workflow task",
	})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(dropped, append(line, '\n'), 0o644))
	droppedLogs, err := readWorkerLogs([]string{dropped})
	require.NoError(t, err)
	kill := []Fault{{Kind: FaultKill, PID: 7, At: at.Add(time.Millisecond), Until: at.Add(time.Millisecond)}}

	for _, tt := range []struct {
		name     string
		attempts [2]int
		faults   []Fault
		logs     *workerLogs
		// first and second are the executions' pids; 7, the pid of the
		// faults and lines, by default.
		first, second int
		want          string
	}{
		{name: "attempt 1 again, its worker killed", attempts: [2]int{1, 1}, faults: kill, want: "kill"},
		{name: "attempt 1 again, its schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, want: "lease_expiry"},
		{name: "attempt 1 again, the second's schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, second: 7, first: 8, want: "dropped_ahead"},
		{name: "attempt 1 again, another's schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, second: 9, first: 8, want: ""},
		{name: "attempt 1 again, nothing", attempts: [2]int{1, 1}, want: ""},
		{name: "attempt 2 again, its worker killed", attempts: [2]int{2, 2}, faults: kill, want: ""},
		{name: "attempt 2 after 3", attempts: [2]int{3, 2}, faults: kill, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := &checker{faults: tt.faults, logs: cmp.Or(tt.logs, &workerLogs{}), lease: time.Second}
			require.Equal(t, tt.want, c.explain(exec(tt.attempts[0], cmp.Or(tt.first, 7)), exec(tt.attempts[1], cmp.Or(tt.second, 7))))
		})
	}
}

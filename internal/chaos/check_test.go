package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
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

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
)

// fixture is a database on which the workload ran to its end with an
// engine in this process, as the checker finds the rig's.
type fixture struct {
	pool  *pgxpool.Pool
	codec codec.PayloadCodec
	pid   int
	// log is the engine's log, as a worker's.
	log string
}

// The IDs runWorkload gives the workflows of kinds other than Flow.
const (
	drainID     = "chaos-drain"
	versionedID = "chaos-versioned"
	spinID      = "chaos-spin"
)

func failID(mode string) string { return "chaos-fail-" + mode }

// runWorkload runs n Flows and one workflow of each other kind (a Fail of
// each mode) to their ends with an engine in this process, with the rig's
// payload codec, on a database with the rig's tables. Its connections
// carry the engine's worker ID, as a worker's do.
func runWorkload(t *testing.T, n int) *fixture {
	t.Helper()
	pid := os.Getpid()
	cfg, err := pgxpool.ParseConfig(pgtest.Database(t))
	require.NoError(t, err)
	cfg.ConnConfig.RuntimeParams["application_name"] = workerID(0, pid)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	_, err = pool.Exec(ctx, schemaSQL)
	require.NoError(t, err)
	key, _ := payloadKeys(1)
	c, err := codec.AESGCM(key)
	require.NoError(t, err)
	logPath := filepath.Join(t.TempDir(), "worker-0.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() { logFile.Close() })
	log := slog.New(slog.NewJSONHandler(logFile, nil)).With(slog.Int("pid", pid))
	w := &workload{pool: pool, pid: pid, log: log, lease: 5 * time.Second, gen: 2}
	e, err := engine.New(pool, engine.Options{
		Logger: log, PollInterval: time.Second, Codec: c, WorkerID: workerID(0, pid),
		WorkflowDeadlockTimeout: 100 * time.Millisecond,
	})
	require.NoError(t, err)
	require.NoError(t, w.register(e))
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()
	record := func(id string, kind Kind, in any) {
		raw, err := json.Marshal(in)
		require.NoError(t, err)
		_, err = pool.Exec(ctx, `INSERT INTO chaos_workflows (workflow_id, kind, input) VALUES ($1, $2, $3)`, id, kind, raw)
		require.NoError(t, err)
	}
	for seq := 1; seq <= n; seq++ {
		in := newInput(rand.New(rand.NewPCG(1, uint64(seq))), seq)
		id := fmt.Sprintf("chaos-%06d", seq)
		record(id, KindFlow, in)
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

	drain := DrainInput{Seq: 1001, Activity: true, WorkMS: 10, Signals: 3}
	record(drainID, KindDrain, drain)
	note := func(idx int, outcome string) {
		_, err := pool.Exec(ctx, `INSERT INTO chaos_signals (workflow_id, idx, outcome) VALUES ($1, $2, $3)`, drainID, idx, outcome)
		require.NoError(t, err)
	}
	drainRun, err := engine.SignalWithStart(ctx, e, w.Drain, drain, engine.StartOptions{ID: drainID}, drainSignal, Signal{Index: 0, Value: 1})
	require.NoError(t, err)
	note(0, "accepted")
	for i := 1; i <= drain.Signals; i++ {
		switch err := engine.Signal(ctx, e, drainID, drainSignal, Signal{Index: i, Value: 1}); {
		case err == nil:
			note(i, "accepted")
		case errors.Is(err, engine.ErrRunClosed):
			note(i, "closed")
		default:
			require.NoError(t, err)
		}
	}
	drained, err := drainRun.Result(ctx)
	require.NoError(t, err)
	require.True(t, drained.FirstSeen, "the first task sees the signal sent with the start")

	for i, mode := range failModes {
		record(failID(mode), KindFail, FailInput{Seq: 2001 + i, Mode: mode})
		run, err := engine.Start(ctx, e, w.Fail, FailInput{Seq: 2001 + i, Mode: mode}, engine.StartOptions{ID: failID(mode)})
		require.NoError(t, err)
		_, err = run.Result(ctx)
		var we *engine.WorkflowError
		require.ErrorAs(t, err, &we, "mode %s", mode)
	}

	versioned := VersionedInput{Seq: 3001, Iterations: 3}
	record(versionedID, KindVersioned, versioned)
	vrun, err := engine.Start(ctx, e, w.Versioned, versioned, engine.StartOptions{ID: versionedID})
	require.NoError(t, err)
	_, err = vrun.Result(ctx)
	require.NoError(t, err)

	spin := SpinInput{Seq: 4001, SpinMS: 300}
	record(spinID, KindSpin, spin)
	_, err = engine.Start(ctx, e, w.Spin, spin, engine.StartOptions{ID: spinID})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := e.Describe(ctx, spinID)
		return err == nil && strings.Contains(info.TaskError, "deadlock")
	}, 30*time.Second, 20*time.Millisecond, "the spinning code's task fails with a deadlock error")
	require.NoError(t, e.Terminate(ctx, spinID, "chaos: the code never yields"))
	_, err = pool.Exec(ctx, `UPDATE chaos_workflows SET terminated = true WHERE workflow_id = $1`, spinID)
	require.NoError(t, err)
	// The abandoned code spins on, in this process, until SpinMS ends, and
	// a replay of its run here fails until then (the checker runs in
	// another process than the workers).
	replayer, err := engine.NewReplayer(engine.ReplayerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Codec: c})
	require.NoError(t, err)
	require.NoError(t, (&workload{gen: 2, replay: true}).register(replayer))
	h, err := e.ExportHistory(ctx, spinID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return replayer.Replay(ctx, h) == nil }, 30*time.Second, 20*time.Millisecond,
		"the spinning code ends, and its run replays")
	return &fixture{pool: pool, codec: c, pid: pid, log: logPath}
}

// extraKinds is how many workflows runWorkload runs besides its Flows.
var extraKinds = 1 + len(failModes) + 1 + 1

func (fx *fixture) runID(t *testing.T, workflowID string) string {
	t.Helper()
	var id string
	require.NoError(t, fx.pool.QueryRow(context.Background(),
		`SELECT run_id::text FROM durable_runs WHERE workflow_id = $1`, workflowID).Scan(&id))
	return id
}

func (fx *fixture) flowRunID(t *testing.T, seq int) string {
	t.Helper()
	return fx.runID(t, fmt.Sprintf("chaos-%06d", seq))
}

func (fx *fixture) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := fx.pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// check runs the checker, with the engine's log as the worker's unless
// logs are given.
func (fx *fixture) check(t *testing.T, faults []Fault, logs *workerLogs) Findings {
	t.Helper()
	if logs == nil {
		var err error
		logs, err = readWorkerLogs([]string{fx.log})
		require.NoError(t, err)
	}
	f, err := check(context.Background(), fx.pool, checkInput{faults: faults, logs: logs, lease: time.Second, codec: fx.codec})
	require.NoError(t, err)
	return f
}

// TestCheckPassesCleanWorkload runs the checker over a workload that ran
// without faults: no violations, and the counts add up.
func TestCheckPassesCleanWorkload(t *testing.T) {
	t.Parallel()
	fx := runWorkload(t, 2)
	f := fx.check(t, nil, nil)
	require.Empty(t, f.Violations)
	require.Equal(t, 2+extraKinds, f.Workflows)
	require.Equal(t, map[Kind]int{KindFlow: 2, KindDrain: 1, KindFail: 3, KindVersioned: 1, KindSpin: 1}, f.Kinds)
	require.Equal(t, 2+extraKinds, f.Runs)
	require.Equal(t, 2*7+1+1+3, f.Executions-f.DuplicateExecutions, "5 Work, Beat and Effect per Flow; Drain's, the failing workflow's and Versioned's")
	require.Equal(t, 2, f.TimersFired)
	require.Equal(t, 2, f.ExactlyOnceEffects)
	require.Zero(t, f.Unexplained, "an activity that ran ahead of a schedule a signal kept from committing runs again, as its log says")
	require.Equal(t, 2, f.SignalsDeliveredTwice, "runWorkload sends each workflow's first signal twice")
	require.Positive(t, f.SignalsAccepted)
	require.Equal(t, 3, f.BadTextRuns)
	require.Equal(t, 1, f.VersionedRuns)
	require.Equal(t, 1, f.NewBranchRuns)
	require.Equal(t, 1, f.SpinRunsChecked)
	require.Positive(t, f.OutcomesChecked)
	require.Positive(t, f.HeartbeatsChecked)
	require.Positive(t, f.CommitsChecked)
	require.Positive(t, f.ClaimsChecked)
}

// TestCheckFindsViolations damages a completed workload in every way the
// checker must notice, one workflow per kind of damage, and expects each
// to be found and counted once.
func TestCheckFindsViolations(t *testing.T) {
	t.Parallel()
	fx := runWorkload(t, 7)

	// 1: an event disappears from the middle of a history.
	fx.exec(t, `DELETE FROM durable_events WHERE run_id = $1 AND event_id = 3`, fx.flowRunID(t, 1))
	// 2: an activity completes twice: by a transaction that held no claim
	// of it, too.
	run2 := fx.flowRunID(t, 2)
	fx.exec(t, `
WITH last AS (SELECT next_event_id AS id FROM durable_runs WHERE run_id = $1),
     done AS (SELECT type, attributes FROM durable_events WHERE run_id = $1 AND type = 'activity_completed' ORDER BY event_id LIMIT 1)
INSERT INTO durable_events (run_id, event_id, type, attributes, created_at)
SELECT $1, last.id, done.type, done.attributes, now() FROM last, done`, run2)
	fx.exec(t, `UPDATE durable_runs SET next_event_id = next_event_id + 1 WHERE run_id = $1`, run2)
	// 3: a run completed with a result its input does not imply (and its
	// closing event does not hold).
	fx.exec(t, `UPDATE durable_runs SET result = '{"seq": 3, "work": 0}' WHERE run_id = $1`, fx.flowRunID(t, 3))
	// 4: a timer fired before its time, by the database's record.
	fx.exec(t, `UPDATE chaos_timer_fires SET fired_at = fired_at - interval '1 hour' WHERE run_id = $1`, fx.flowRunID(t, 4))
	// 5: the exactly-once effect applied twice.
	fx.exec(t, `INSERT INTO chaos_effects (idempotency_key, pid) SELECT idempotency_key, pid FROM chaos_effects WHERE idempotency_key LIKE $1 || ':%'`, fx.flowRunID(t, 5))
	// 6: an activity ran again with nothing to explain it.
	fx.exec(t, `
INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at, created_at)
SELECT kind, idempotency_key, run_id, workflow_id, attempt + 1, pid, created_at + interval '1 second', created_at + interval '2 seconds'
FROM chaos_ledger WHERE run_id = $1 AND kind = 'work' ORDER BY id LIMIT 1`, fx.flowRunID(t, 6))
	// 7: a task left behind.
	fx.exec(t, `INSERT INTO durable_workflow_tasks (run_id, queue, run_after) VALUES ($1, 'default', now())`, fx.flowRunID(t, 7))

	f := fx.check(t, nil, nil)
	all := strings.Join(f.Violations, "\n")
	require.Equal(t, 1, f.HistoryGaps, all)
	require.Equal(t, 1, f.DoubleCompletions, all)
	require.Equal(t, 1, f.ReplayFailures, "the doubled completion does not replay: %s", all)
	require.Equal(t, 1, f.StaleAccepted, "the doubled completion was written under no claim: %s", all)
	require.Equal(t, 1, f.Lost, all)
	require.Contains(t, all, "its closing event")
	require.Equal(t, 1, f.EarlyTimerFires, all)
	require.Equal(t, 1, f.ExactlyOnceViolations, all)
	require.Equal(t, 1, f.Unexplained, all)
	require.Equal(t, 1, f.Leftover, all)
	require.Contains(t, all, "that closed the run", "the doubled completion came after the close")
	require.Len(t, f.Violations, 11, all)
}

// TestCheckFindsWhatTheRigMustSee damages a completed workload in the ways
// the newer checks look for: a lost signal, a signal no worker can decode,
// a failure recorded without its text, a never-yielding run that wrote, a
// versioned run that went back to old code, a timer off the database's
// clock, a closing event whose result the code does not return, and
// writes accepted from other than the claim that held the row.
func TestCheckFindsWhatTheRigMustSee(t *testing.T) {
	t.Parallel()
	fx := runWorkload(t, 5)

	// A signal whose Signal call returned nil, and which the run never
	// counted.
	fx.exec(t, `INSERT INTO chaos_signals (workflow_id, idx, outcome) VALUES ($1, 9, 'accepted')`, drainID)
	// A signal from an engine with another key: it does not decode, so
	// the history does not replay either.
	fx.exec(t, `
UPDATE durable_events SET attributes = jsonb_set(attributes, '{payload}', '{"durable_codec": "AQAA"}')
WHERE run_id = $1 AND event_id = (SELECT min(event_id) FROM durable_events WHERE run_id = $1 AND type = 'signal_received')`, fx.flowRunID(t, 1))
	// A failure recorded without the text it failed with.
	fx.exec(t, `UPDATE durable_runs SET failure = jsonb_set(failure, '{message}', '"chaos: bad text"') WHERE workflow_id = $1`, failID(failActivityError))
	// The never-yielding run's activity ran after all.
	spinRun := fx.runID(t, spinID)
	fx.exec(t, `INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at)
VALUES ('work', $1 || ':1', $1, $2, 1, 1, now())`, spinRun, spinID)
	// The versioned run's last activity was scheduled by the first
	// generation of the code, after the second had scheduled the others.
	fx.exec(t, `UPDATE chaos_ledger SET gen = 1 WHERE id = (SELECT max(id) FROM chaos_ledger WHERE workflow_id = $1)`, versionedID)
	// A timer whose due time came from a clock an hour behind the
	// database's.
	fx.exec(t, `UPDATE chaos_timer_starts SET started_at = started_at + interval '1 hour' WHERE run_id = $1`, fx.flowRunID(t, 2))
	// The closing event of a run holds a result the code does not return
	// (the run's row holds the right one): replay compares results.
	fx.exec(t, `
UPDATE durable_events SET attributes = '{"result": {"seq": 3, "work": 1}}'
WHERE run_id = $1 AND type = 'workflow_completed'`, fx.flowRunID(t, 3))

	f := fx.check(t, nil, nil)
	all := strings.Join(f.Violations, "\n")
	require.Equal(t, 1, f.LostSignals, all)
	require.Equal(t, 1, f.UndecodableSignals, all)
	require.Equal(t, 2, f.ReplayFailures, "the undecodable signal and the changed result: %s", all)
	require.Contains(t, all, "its closing event", "the run's row and its closing event differ")
	require.Equal(t, 1, f.BadTextViolations, all)
	require.Equal(t, 1, f.SpinViolations, all)
	require.Equal(t, 1, f.VersionViolations, all)
	require.Equal(t, 1, f.TimerClockViolations, all)
	require.Zero(t, f.Lost, all)
	// The changed closing event was written by the test's transaction,
	// which ended no claim: the database shows that too.
	require.Equal(t, 1, f.StaleAccepted, all)
	require.Len(t, f.Violations, 10, all)
}

// TestCheckFindsStaleWritesInTheDatabase changes the database's record of
// who wrote what (the rig's triggers' tables), one write of each kind, and
// expects each to be found: the fencing checks read what the database
// accepted, not the workers' logs.
func TestCheckFindsStaleWritesInTheDatabase(t *testing.T) {
	t.Parallel()
	fx := runWorkload(t, 3)
	const other = "chaos-s1-p1"
	// outcomeDeletes picks the task deletes that recorded an ordinary
	// outcome (the completion's own transaction).
	const outcomeDeletes = `
SELECT d.id FROM chaos_act_log d JOIN durable_events e
    ON e.run_id = d.run_id AND e.type = 'activity_completed' AND (e.attributes->>'seq')::bigint = d.seq AND e.xmin::text::bigint = d.xid
WHERE d.op = 'delete' AND EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.idempotency_key = d.idempotency_key AND l.kind = 'work')
    AND NOT EXISTS (SELECT 1 FROM durable_events c WHERE c.run_id = d.run_id AND c.xmin::text::bigint = d.xid
                    AND c.type NOT IN ('activity_completed', 'activity_failed'))
ORDER BY d.id`

	// An outcome written by a worker that did not hold the task.
	fx.exec(t, `UPDATE chaos_act_log SET writer = $1 WHERE id = (`+outcomeDeletes+` LIMIT 1)`, other)
	// An outcome of an attempt that no longer held it.
	fx.exec(t, `
UPDATE chaos_act_log SET old_attempt = old_attempt + 3 WHERE id = (
    SELECT min(d.id) FROM chaos_act_log d JOIN durable_events e
        ON e.run_id = d.run_id AND e.type = 'activity_completed' AND (e.attributes->>'seq')::bigint = d.seq AND e.xmin::text::bigint = d.xid
    WHERE d.op = 'delete' AND EXISTS (SELECT 1 FROM chaos_ledger l WHERE l.idempotency_key = d.idempotency_key AND l.kind = 'beat'))`)
	// A completion of an attempt the ledger never saw run.
	fx.exec(t, `UPDATE chaos_ledger SET attempt = attempt + 10 WHERE id = (SELECT min(id) FROM chaos_ledger WHERE kind = 'effect')`)
	// A commit written by a worker that did not hold the workflow task.
	fx.exec(t, `
UPDATE chaos_wt_log SET writer = $1 WHERE id = (
    SELECT min(w.id) FROM chaos_wt_log w
    WHERE w.op IN ('delete', 'release')
      AND EXISTS (SELECT 1 FROM durable_events e WHERE e.run_id = w.run_id AND e.xmin::text::bigint = w.xid
                  AND e.type IN ('activity_scheduled', 'workflow_task_completed', 'workflow_failed'))
      AND NOT EXISTS (SELECT 1 FROM durable_events e WHERE e.run_id = w.run_id AND e.xmin::text::bigint = w.xid AND e.type = 'activity_completed'))`, other)
	// A heartbeat of another attempt.
	fx.exec(t, `UPDATE chaos_act_log SET heartbeat = '{"attempt": 99, "pid": 1, "n": 0}' WHERE id = (SELECT min(id) FROM chaos_act_log WHERE op = 'heartbeat')`)
	// A claim of a workflow task whose lease had a second to run.
	fx.exec(t, `UPDATE chaos_wt_log SET old_holder = $1, old_locked_until = at + interval '1 second' WHERE id = (SELECT min(id) FROM chaos_wt_log WHERE op = 'claim')`, other)

	f := fx.check(t, nil, nil)
	all := strings.Join(f.Violations, "\n")
	require.Equal(t, 5, f.StaleAccepted, all)
	for _, want := range []string{
		"written by " + other + " while " + workerID(0, fx.pid) + " held the task",
		"accepted while attempt",
		"the ledger has that attempt run by []",
		"committed by " + other + " while",
		"heartbeat of attempt 99",
	} {
		require.Contains(t, all, want)
	}
	require.Equal(t, 1, f.EarlyClaims, all)
	require.Contains(t, all, "while "+other+"'s lease ran until")
	require.Len(t, f.Violations, 6, all)
}

// TestCheckExplainsDuplicates gives the checker the faults and log lines
// that explain a second execution, one at a time, with the database
// showing that the first attempt's lease ran out before the second
// claimed the task.
func TestCheckExplainsDuplicates(t *testing.T) {
	t.Parallel()
	fx := runWorkload(t, 1)
	ctx := context.Background()
	var (
		key          string
		pid, attempt int
		at           time.Time
		taskID       int64
	)
	require.NoError(t, fx.pool.QueryRow(ctx, `
SELECT l.idempotency_key, l.pid, l.attempt, l.created_at, k.task_id
FROM chaos_ledger l JOIN chaos_act_log k ON k.op = 'insert' AND k.idempotency_key = l.idempotency_key
WHERE l.kind = 'work' ORDER BY l.id LIMIT 1`).Scan(&key, &pid, &attempt, &at, &taskID))
	// Only this duplicate: none the workload made itself.
	fx.exec(t, `DELETE FROM chaos_ledger l WHERE EXISTS (SELECT 1 FROM chaos_ledger o WHERE o.idempotency_key = l.idempotency_key AND o.id < l.id)`)
	fx.exec(t, `
INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at, created_at)
SELECT kind, idempotency_key, run_id, workflow_id, attempt + 1, pid + 1, created_at + interval '1 second', created_at + interval '2 seconds'
FROM chaos_ledger WHERE idempotency_key = $1`, key)
	// The database's record of the second claim: it took the task from
	// the first attempt's worker after its lease ran out.
	fx.exec(t, `
INSERT INTO chaos_act_log (op, task_id, idempotency_key, attempt, old_attempt, holder, old_holder, old_locked_until, writer, xid, at)
VALUES ('claim', $1, $2, $3 + 1, $3, $4, $5, $6::timestamptz + interval '500 milliseconds', $4, 0, $6::timestamptz + interval '900 milliseconds')`,
		taskID, key, attempt, workerID(1, pid+1), workerID(0, pid), at)

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

	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	for _, tt := range []struct {
		name   string
		faults []Fault
		logs   []string
		want   string // "" for unexplained
	}{
		{name: "nothing", want: ""},
		{name: "kill of its worker", faults: []Fault{{Kind: FaultKill, PID: pid, At: ms(10), Until: ms(20)}}, want: "kill"},
		{name: "kill of another worker", faults: []Fault{{Kind: FaultKill, PID: pid + 7, At: ms(10), Until: ms(20)}}, want: ""},
		{name: "kill within a lease after the second started, before the refusal was logged", faults: []Fault{{Kind: FaultKill, PID: pid, At: ms(1500), Until: ms(1500)}}, want: "lease_expiry"},
		{name: "kill long after", faults: []Fault{{Kind: FaultKill, PID: pid, At: ms(5000), Until: ms(5000)}}, want: ""},
		{name: "kill long before", faults: []Fault{{Kind: FaultKill, PID: pid, At: at.Add(-time.Hour), Until: at.Add(-time.Hour)}}, want: ""},
		{name: "pause", faults: []Fault{{Kind: FaultPause, PID: pid, At: ms(-1000), Until: ms(1000)}}, want: "pause"},
		{name: "server stop during it", faults: []Fault{{Kind: FaultStopCrash, At: ms(500), Until: ms(3000)}}, want: "postgres"},
		{name: "server stop after the second started", faults: []Fault{{Kind: FaultStopCrash, At: ms(1500), Until: ms(3000)}}, want: ""},
		{name: "its worker's connection killed", faults: []Fault{{Kind: FaultConnKill, PIDs: []int{0, pid}, N: 2, At: ms(10), Until: ms(20)}}, want: "postgres"},
		{name: "other connections killed", faults: []Fault{{Kind: FaultConnKill, PIDs: []int{0, pid + 7}, N: 2, At: ms(10), Until: ms(20)}}, want: ""},
		{name: "refused outcome in its log", logs: []string{logPath}, want: "lease_expiry"},
		{name: "refused outcome of another process", logs: []string{otherLog}, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logs, err := readWorkerLogs(tt.logs)
			require.NoError(t, err)
			f := fx.check(t, tt.faults, logs)
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

// TestExplainRestsOnTheDatabase: a lost lease explains a second attempt
// only if the database shows the first attempt's worker holding the task
// until its lease ran out and another claim taking it then; the worker's
// log line alone, or a fault, does not.
func TestExplainRestsOnTheDatabase(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	a := execution{kind: "work", key: "run-1:1", attempt: 1, pid: 7, started: at, createdAt: at.Add(10 * time.Millisecond)}
	b := execution{kind: "work", key: "run-1:1", attempt: 2, pid: 8, started: at.Add(1200 * time.Millisecond), createdAt: at.Add(1300 * time.Millisecond)}
	logs := &workerLogs{lostByKey: map[keyAttempt]string{{7, "run-1:1", 1}: "lease_expiry"}}
	kill := []Fault{{Kind: FaultKill, PID: 7, At: at.Add(100 * time.Millisecond), Until: at.Add(100 * time.Millisecond)}}
	expired := &keyFacts{takeovers: map[int]takeover{1: {oldHolder: workerID(0, 7), oldUntil: at.Add(time.Second), at: at.Add(1100 * time.Millisecond)}}}
	live := &keyFacts{takeovers: map[int]takeover{1: {oldHolder: workerID(0, 7), oldUntil: at.Add(2 * time.Second), at: at.Add(1100 * time.Millisecond)}}}
	fromOther := &keyFacts{takeovers: map[int]takeover{1: {oldHolder: workerID(2, 9), oldUntil: at.Add(time.Second), at: at.Add(1100 * time.Millisecond)}}}
	failedWrite := &workerLogs{lostByKey: map[keyAttempt]string{{7, "run-1:1", 1}: "write_failed"}}
	givenBack := &keyFacts{
		holders: map[int]string{1: workerID(0, 7)}, heldSince: map[int]time.Time{1: at},
		takeovers: map[int]takeover{1: {at: at.Add(100 * time.Millisecond)}},
	}
	heldByOther := &keyFacts{
		holders: map[int]string{1: workerID(2, 9)}, heldSince: map[int]time.Time{1: at.Add(500 * time.Millisecond)},
		takeovers: map[int]takeover{1: {oldHolder: workerID(2, 9), oldUntil: at.Add(time.Second), at: at.Add(1100 * time.Millisecond)}},
	}
	for _, tt := range []struct {
		name   string
		faults []Fault
		logs   *workerLogs
		facts  *keyFacts
		want   string
	}{
		{name: "log line and a takeover after the lease", logs: logs, facts: expired, want: "lease_expiry"},
		{name: "log line alone", logs: logs, want: ""},
		{name: "log line, but the lease was live when it was taken", logs: logs, facts: live, want: ""},
		{name: "log line of the first, but another worker held the attempt", logs: logs, facts: fromOther, want: ""},
		{name: "kill and a takeover after the lease", faults: kill, facts: expired, want: "kill"},
		{name: "kill, but the lease was live when it was taken", faults: kill, facts: live, want: ""},
		{name: "kill of the worker that held the attempt the first ran ahead of", facts: heldByOther, want: "kill",
			faults: []Fault{{Kind: FaultKill, PID: 9, At: at.Add(600 * time.Millisecond), Until: at.Add(600 * time.Millisecond)}}},
		// Its schedule did not commit: the activity had to run again, and
		// the claim the committed schedule made ran it as its next attempt.
		{name: "kill of the first, which ran ahead, while another held the attempt", facts: heldByOther, faults: kill, want: "kill"},
		{name: "its failed write logged, and its claim given back", logs: failedWrite, facts: givenBack, want: "write_failed"},
		{name: "its claim given back, nothing logged", facts: givenBack, want: ""},
		{name: "its failed write logged, and its claim taken while the lease held", logs: failedWrite, facts: live, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &checker{faults: tt.faults, logs: cmp.Or(tt.logs, &workerLogs{}), lease: time.Second}
			require.Equal(t, tt.want, c.explain(a, b, tt.facts))
		})
	}
}

// TestStaleWatchSeesARefusedWriteOnceItsLineIsWhole checks the live watch
// the rig waits on: lines it has read are not read again, a line cut short
// is read once it ends, and only a refused write counts.
func TestStaleWatchSeesARefusedWriteOnceItsLineIsWhole(t *testing.T) {
	t.Parallel()
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
// attempt that ran ahead of its schedule holds no claim), explained by a
// fault on the worker of the one that did not hold attempt 1's claim, as
// the database shows, or that worker logging the drop; any later attempt
// running twice is one claim run twice, which nothing explains.
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
	// lateKill kills pid 7 two seconds after its attempt: past the
	// attempt's lease, while its schedule's commit may still be waiting
	// (a server stop, say).
	lateKill := []Fault{{Kind: FaultKill, PID: 7, At: at.Add(2 * time.Second), Until: at.Add(2 * time.Second)}}
	heldBy := func(pid int) *keyFacts { return &keyFacts{holders: map[int]string{1: workerID(0, pid)}} }

	for _, tt := range []struct {
		name     string
		attempts [2]int
		faults   []Fault
		logs     *workerLogs
		facts    *keyFacts
		// first and second are the executions' pids; 7, the pid of the
		// faults and lines, by default.
		first, second int
		want          string
	}{
		{name: "the first ran ahead, its worker killed", attempts: [2]int{1, 1}, faults: kill, second: 8, facts: heldBy(8), want: "kill"},
		{name: "the first ran ahead, its schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, second: 8, facts: heldBy(8), want: "dropped_ahead"},
		{name: "the first ran ahead, its worker killed while its schedule's commit waited", attempts: [2]int{1, 1}, faults: lateKill, second: 8,
			facts: &keyFacts{holders: map[int]string{1: workerID(0, 8)}, scheduled: at.Add(3 * time.Second)}, want: "kill"},
		{name: "the first ran ahead, its worker killed after the recorded schedule", attempts: [2]int{1, 1}, faults: lateKill, second: 8,
			facts: &keyFacts{holders: map[int]string{1: workerID(0, 8)}, scheduled: at.Add(time.Second / 2)}, want: ""},
		{name: "the second ran ahead, its schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, first: 8, facts: heldBy(8), want: "dropped_ahead"},
		{name: "the drop logged by the worker that held attempt 1", attempts: [2]int{1, 1}, logs: droppedLogs, second: 8, facts: heldBy(7), want: ""},
		{name: "the drop logged, no record of the claim", attempts: [2]int{1, 1}, logs: droppedLogs, second: 8, want: ""},
		{name: "one worker ran it twice, ahead of the schedule that committed", attempts: [2]int{1, 1}, logs: droppedLogs,
			facts: &keyFacts{scheduled: at.Add(time.Second)}, want: "dropped_ahead"},
		{name: "one worker ran it twice, after the schedule committed", attempts: [2]int{1, 1}, logs: droppedLogs,
			facts: &keyFacts{scheduled: at.Add(-time.Second)}, want: ""},
		{name: "one worker ran it twice, the first started before the schedule committed", attempts: [2]int{1, 1}, logs: droppedLogs,
			facts: &keyFacts{scheduled: at.Add(time.Microsecond)}, want: "dropped_ahead"},
		{name: "another's schedule dropped", attempts: [2]int{1, 1}, logs: droppedLogs, second: 9, first: 8, facts: heldBy(8), want: ""},
		{name: "attempt 1 again, nothing", attempts: [2]int{1, 1}, second: 8, facts: heldBy(8), want: ""},
		{name: "attempt 2 again, its worker killed", attempts: [2]int{2, 2}, faults: kill, facts: heldBy(8), want: ""},
		{name: "attempt 2 after 3", attempts: [2]int{3, 2}, faults: kill, want: ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &checker{faults: tt.faults, logs: cmp.Or(tt.logs, &workerLogs{}), lease: time.Second}
			require.Equal(t, tt.want, c.explain(exec(tt.attempts[0], cmp.Or(tt.first, 7)), exec(tt.attempts[1], cmp.Or(tt.second, 7)), tt.facts))
		})
	}
}

// TestTableSaysAllExplainedOnlyWhenAllAre: the report's duplicate row
// claims "all explained" only when no duplicate is unexplained.
func TestTableSaysAllExplainedOnlyWhenAllAre(t *testing.T) {
	t.Parallel()
	r := &Report{Findings: Findings{DuplicateExecutions: 3, Explained: map[string]int{"kill": 3}}}
	require.Contains(t, r.Table(), "duplicate executions (all explained)  ")
	r = &Report{Findings: Findings{DuplicateExecutions: 3, Explained: map[string]int{"kill": 2}, Unexplained: 1}}
	require.NotContains(t, r.Table(), "all explained")
	require.Contains(t, r.Table(), "duplicate executions (1 unexplained)")
}

// TestCheckDrainCountsEverySignal feeds the Drain check results that lost
// a signal, or missed the start's signal in the first task.
func TestCheckDrainCountsEverySignal(t *testing.T) {
	t.Parallel()
	run := &runFacts{runID: "run-1", drained: []int{0, 1, 2}}
	accepted := []signalNote{{0, "accepted"}, {1, "accepted"}, {2, "accepted"}, {3, "closed"}}
	for _, tt := range []struct {
		name      string
		got       DrainResult
		lost      int
		firstMiss int
	}{
		{name: "all counted", got: DrainResult{FirstSeen: true, Indices: []int{0, 1, 2}, Count: 3}},
		{name: "one lost", got: DrainResult{FirstSeen: true, Indices: []int{0, 1}, Count: 2}, lost: 1},
		{name: "first task missed the start's signal", got: DrainResult{Indices: []int{0, 1, 2}, Count: 3}, firstMiss: 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &checker{f: Findings{}}
			c.checkDrain("chaos-1", run, tt.got, accepted)
			require.Equal(t, tt.lost, c.f.LostSignals, c.f.Violations)
			require.Equal(t, tt.firstMiss, c.f.FirstSignalMissed, c.f.Violations)
			require.Equal(t, 3, c.f.SignalsAccepted)
			require.Equal(t, 1, c.f.SignalsRefusedClosed)
			require.Len(t, c.f.Violations, tt.lost+tt.firstMiss)
		})
	}
}

// TestWorkerLogsTellReusedPIDsApart: the operating system reuses a killed
// worker's pid, for a worker of another slot too. Read as one process, the
// two had a first line after their last, so no outage fell in between and
// the log-volume check found a flood where there was none (a 30-minute run
// of 2026-12-03).
func TestWorkerLogsTellReusedPIDsApart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	line := func(at string) string {
		return `{"time":"2026-12-03T` + at + `Z","level":"WARN","msg":"database unreachable; background work retries with backoff until it answers (retries are logged at Debug)","pid":42}` + "\n"
	}
	early, late := filepath.Join(dir, "worker-0.log"), filepath.Join(dir, "worker-1.log")
	require.NoError(t, os.WriteFile(early, []byte(line("15:14:59.3")+line("15:15:01.2")), 0o600))
	require.NoError(t, os.WriteFile(late, []byte(line("15:03:29.2")+line("15:03:46.5")), 0o600))
	wl, err := readWorkerLogs([]string{early, late})
	require.NoError(t, err)
	require.Len(t, wl.procs, 2, "two processes with one pid")
	for k, p := range wl.procs {
		require.Equal(t, 42, k.pid)
		require.False(t, p.last.Before(p.first), "file %d: first %s, last %s", k.file, p.first, p.last)
	}
}

// A timer whose due time is more than a lease behind the database's time
// at its insert is a clock off the database's, unless its writer was
// paused, or its database went away, between the task's time and the
// insert: a late commit, on the task's time.
func TestTimerClockExplainsOnlyAPausedWriter(t *testing.T) {
	t.Parallel()
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	started := history.Event{ID: 9, Time: at, Attributes: history.TimerStarted{Seq: 7, FireAt: at.Add(400 * time.Millisecond)}}
	late := map[int64]timerStart{7: {fireAt: at.Add(400 * time.Millisecond), at: at.Add(3 * time.Second), writer: "chaos-s1-p42"}}
	for _, tt := range []struct {
		name   string
		faults []Fault
		want   int // violations
	}{
		{"no fault", nil, 1},
		{"its writer paused", []Fault{{Kind: FaultPause, PID: 42, At: at.Add(time.Second), Until: at.Add(2500 * time.Millisecond)}}, 0},
		{"another worker paused", []Fault{{Kind: FaultPause, PID: 43, At: at.Add(time.Second), Until: at.Add(2500 * time.Millisecond)}}, 1},
		{"its writer paused before the task", []Fault{{Kind: FaultPause, PID: 42, At: at.Add(-3 * time.Second), Until: at.Add(-2 * time.Second)}}, 1},
		{"the database restarted", []Fault{{Kind: FaultStopFast, At: at.Add(time.Second), Until: at.Add(2 * time.Second)}}, 0},
		{"another worker's connection killed", []Fault{{Kind: FaultConnKill, PIDs: []int{43}, At: at.Add(time.Second), Until: at.Add(time.Second)}}, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := &checker{faults: tt.faults, logs: &workerLogs{}, lease: time.Second}
			c.checkTimerClock(&runFacts{runID: "r"}, 7, started, late)
			require.Equal(t, tt.want, c.f.TimerClockViolations, c.f.Violations)
			require.Equal(t, 1-tt.want, c.f.TimerClockPaused)
		})
	}
}

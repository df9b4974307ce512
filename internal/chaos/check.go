package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
)

// Findings are what the checker counted, and the violations it found. A
// workload that lost nothing has no violations.
type Findings struct {
	// Workflows the driver started, and Runs in the database.
	Workflows int `json:"workflows"`
	Runs      int `json:"runs"`
	// Lost counts workflows without a run that completed with the result
	// its input implies.
	Lost int `json:"lost"`
	// HistoryGaps counts runs whose event IDs are not exactly 1..n.
	HistoryGaps int `json:"history_gaps"`
	// ReplayFailures counts histories the workflow code does not replay.
	ReplayFailures int `json:"replay_failures"`
	// DoubleCompletions counts activities with more than one completion
	// event (or one for an activity never scheduled).
	DoubleCompletions int `json:"double_completions"`
	// Executions are the ledger's rows: every activity execution that got
	// as far as its effect. DuplicateExecutions are those after the first
	// of their idempotency key; each is explained by a fault (Explained, by
	// kind) or Unexplained.
	Executions          int            `json:"executions"`
	DuplicateExecutions int            `json:"duplicate_executions"`
	Explained           map[string]int `json:"explained"`
	Unexplained         int            `json:"duplicate_effects_unexplained"`
	// ExactlyOnceEffects are the effects applied through engine.ExactlyOnce;
	// ExactlyOnceViolations the keys with other than one effect;
	// ExactlyOnceAbsorbed the deliveries the helper kept from applying an
	// effect again.
	ExactlyOnceEffects    int `json:"exactly_once_effects"`
	ExactlyOnceViolations int `json:"exactly_once_violations"`
	ExactlyOnceAbsorbed   int `json:"exactly_once_absorbed"`
	// TimersFired, and those fired before their due time (by the database
	// clock or the engine's) or more than once.
	TimersFired      int `json:"timers_fired"`
	EarlyTimerFires  int `json:"early_timer_fires"`
	DoubleTimerFires int `json:"double_timer_fires"`
	// SignalsDeliveredTwice counts signals in history beyond those the
	// driver meant to send: a send that failed was retried, and had
	// committed after all (the workflow counts each signal once).
	SignalsDeliveredTwice int `json:"signals_delivered_twice"`
	// Leftover counts task and timer rows left behind, and runs still open.
	Leftover int `json:"leftover"`
	// Violations describe each problem found, one line each.
	Violations []string `json:"violations"`
}

// maxViolationLines bounds how many violations are described; the counts
// go on.
const maxViolationLines = 200

type checker struct {
	f      Findings
	faults []Fault
	logs   *workerLogs
	lease  time.Duration
	// taskKeys maps an idempotency key to its activity task ids.
	taskKeys map[string][]int64
}

func (c *checker) violate(format string, args ...any) {
	if len(c.f.Violations) < maxViolationLines {
		c.f.Violations = append(c.f.Violations, fmt.Sprintf(format, args...))
	} else if len(c.f.Violations) == maxViolationLines {
		c.f.Violations = append(c.f.Violations, "... (more violations; the counts are complete)")
	}
}

func check(ctx context.Context, pool *pgxpool.Pool, faults []Fault, logs *workerLogs, lease time.Duration) (Findings, error) {
	c := &checker{f: Findings{Explained: map[string]int{}}, faults: faults, logs: logs, lease: lease, taskKeys: map[string][]int64{}}
	replayer, err := engine.NewReplayer(engine.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return c.f, err
	}
	if err := (&workload{lease: time.Second}).register(replayer); err != nil {
		return c.f, err
	}
	if err := c.loadTaskKeys(ctx, pool); err != nil {
		return c.f, err
	}
	runs, err := c.checkRuns(ctx, pool, replayer)
	if err != nil {
		return c.f, err
	}
	if err := c.checkWorkflows(ctx, pool, runs); err != nil {
		return c.f, err
	}
	if err := c.checkLedger(ctx, pool); err != nil {
		return c.f, err
	}
	if err := c.checkExactlyOnce(ctx, pool, runs); err != nil {
		return c.f, err
	}
	if err := c.checkLeftovers(ctx, pool); err != nil {
		return c.f, err
	}
	return c.f, nil
}

func (c *checker) loadTaskKeys(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT task_id, idempotency_key FROM chaos_task_keys`)
	if err != nil {
		return fmt.Errorf("check: read task keys: %w", err)
	}
	var (
		id  int64
		key string
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &key}, func() error {
		c.taskKeys[key] = append(c.taskKeys[key], id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read task keys: %w", err)
	}
	return nil
}

// runFacts is what the other checks need to know of a run.
type runFacts struct {
	runID, workflowID, status string
	result                    json.RawMessage
	// effectKeys are the idempotency keys of its exactly-once activities.
	effectKeys []string
	signals    int
}

const listRunsSQL = `
SELECT run_id::text, workflow_id, workflow_type, status, result, next_event_id FROM durable_runs`

const listAllEventsSQL = `
SELECT run_id::text, event_id, type, attributes, created_at FROM durable_events ORDER BY run_id, event_id`

// checkRuns checks each run's history: IDs 1..n, a clean replay, one
// completion per activity, timers fired once and never early.
func (c *checker) checkRuns(ctx context.Context, pool *pgxpool.Pool, replayer *engine.Engine) (map[string]*runFacts, error) {
	type runRow struct {
		runFacts
		workflowType string
		nextEventID  int64
	}
	rows, err := pool.Query(ctx, listRunsSQL)
	if err != nil {
		return nil, fmt.Errorf("check: list runs: %w", err)
	}
	runs := map[string]*runRow{}
	var r runRow
	_, err = pgx.ForEachRow(rows, []any{&r.runID, &r.workflowID, &r.workflowType, &r.status, &r.result, &r.nextEventID}, func() error {
		rr := r
		runs[r.runID] = &rr
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: list runs: %w", err)
	}
	c.f.Runs = len(runs)
	fires, err := c.timerFires(ctx, pool)
	if err != nil {
		return nil, err
	}

	// The events stream in run order; each run is checked when its last
	// event has been read, so memory holds one history at a time.
	facts := map[string]*runFacts{}
	var (
		cur    string
		evs    []history.Event
		broken bool
	)
	flush := func() {
		if cur == "" {
			return
		}
		if run := runs[cur]; run != nil && !broken {
			c.checkRun(ctx, replayer, &run.runFacts, run.workflowType, run.nextEventID, evs, fires[cur])
		}
		if run := runs[cur]; run != nil {
			facts[cur] = &run.runFacts
		} else {
			c.violate("run %s: events of a run that does not exist", cur)
		}
		cur, evs, broken = "", evs[:0], false
	}
	rows, err = pool.Query(ctx, listAllEventsSQL)
	if err != nil {
		return nil, fmt.Errorf("check: list events: %w", err)
	}
	var (
		runID, typ string
		id         int64
		attrs      []byte
		at         time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &id, &typ, &attrs, &at}, func() error {
		if runID != cur {
			flush()
			cur = runID
		}
		a, err := history.Decode(typ, attrs)
		if err != nil {
			broken = true
			c.violate("run %s event %d: %v", runID, id, err)
			return nil
		}
		evs = append(evs, history.Event{ID: id, Time: at, Attributes: a})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: list events: %w", err)
	}
	flush()
	for id, run := range runs {
		if facts[id] == nil {
			facts[id] = &run.runFacts
			c.f.HistoryGaps++
			c.violate("run %s (%s): no events at all", id, run.workflowID)
		}
	}
	return facts, nil
}

// checkRun checks one run's history: IDs 1..n, a clean replay, and then
// its completions and timers.
func (c *checker) checkRun(ctx context.Context, replayer *engine.Engine, run *runFacts, workflowType string, nextEventID int64, evs []history.Event, fires map[int64][]time.Time) {
	gap := int64(len(evs)) != nextEventID-1
	for i, e := range evs {
		if e.ID != int64(i+1) {
			gap = true
		}
	}
	if gap {
		c.f.HistoryGaps++
		c.violate("run %s (%s): history has %d events, IDs %s, and the run says %d: not exactly 1..n", run.runID, run.workflowID, len(evs), idRange(evs), nextEventID-1)
		return
	}
	h := history.History{Version: history.FormatVersion, WorkflowID: run.workflowID, RunID: run.runID, WorkflowType: workflowType, Events: evs}
	if err := replayer.Replay(ctx, h); err != nil {
		c.f.ReplayFailures++
		c.violate("run %s (%s): history does not replay: %v", run.runID, run.workflowID, err)
	}
	c.checkHistory(run, evs, fires)
}

func idRange(evs []history.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", evs[0].ID, evs[len(evs)-1].ID)
}

// timerFires reads when each timer fired by the database clock (the
// trigger's clock_timestamp()), by run and seq.
func (c *checker) timerFires(ctx context.Context, pool *pgxpool.Pool) (map[string]map[int64][]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT run_id::text, seq, fired_at FROM chaos_timer_fires`)
	if err != nil {
		return nil, fmt.Errorf("check: read timer fires: %w", err)
	}
	out := map[string]map[int64][]time.Time{}
	var (
		runID string
		seq   int64
		at    time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &seq, &at}, func() error {
		if out[runID] == nil {
			out[runID] = map[int64][]time.Time{}
		}
		out[runID][seq] = append(out[runID][seq], at)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read timer fires: %w", err)
	}
	return out, nil
}

// checkHistory checks one gap-free history: completions and timers.
func (c *checker) checkHistory(run *runFacts, evs []history.Event, fires map[int64][]time.Time) {
	closed := run.status == "completed"
	scheduled := map[int64]string{}
	completions := map[int64]int{}
	timers := map[int64]time.Time{}
	fired := map[int64]int{}
	canceled := map[int64]bool{}
	for _, e := range evs {
		switch a := e.Attributes.(type) {
		case history.ActivityScheduled:
			scheduled[a.Seq] = a.Activity
			if a.Activity == effectName {
				run.effectKeys = append(run.effectKeys, fmt.Sprintf("%s:%d", run.runID, a.Seq))
			}
		case history.ActivityCompleted:
			completions[a.Seq]++
		case history.ActivityFailed:
			completions[a.Seq]++
		case history.ActivityCanceled:
			completions[a.Seq]++
		case history.SignalReceived:
			run.signals++
		case history.TimerStarted:
			timers[a.Seq] = a.FireAt
		case history.TimerCanceled:
			canceled[a.Seq] = true
		case history.TimerFired:
			c.f.TimersFired++
			fired[a.Seq]++
			due, ok := timers[a.Seq]
			switch {
			case !ok:
				c.violate("run %s: event %d fires timer %d, which was never started", run.runID, e.ID, a.Seq)
			case e.Time.Before(due):
				c.f.EarlyTimerFires++
				c.violate("run %s: timer %d due %s fired at %s by the engine's clock: %s early", run.runID, a.Seq, due.Format(time.RFC3339Nano), e.Time.Format(time.RFC3339Nano), due.Sub(e.Time))
			}
		}
	}
	for seq, n := range completions {
		if _, ok := scheduled[seq]; !ok {
			c.f.DoubleCompletions++
			c.violate("run %s: activity seq %d completes but was never scheduled", run.runID, seq)
		} else if n > 1 {
			c.f.DoubleCompletions++
			c.violate("run %s: activity seq %d (%s) completes %d times in history", run.runID, seq, scheduled[seq], n)
		}
	}
	if closed {
		for seq, name := range scheduled {
			if completions[seq] == 0 {
				c.violate("run %s completed but activity seq %d (%s) never did", run.runID, seq, name)
			}
		}
	}
	for seq, due := range timers {
		if fired[seq] > 1 {
			c.f.DoubleTimerFires++
			c.violate("run %s: timer %d fired %d times in history", run.runID, seq, fired[seq])
		}
		if closed && fired[seq] == 0 && !canceled[seq] {
			c.violate("run %s completed but timer %d neither fired nor was canceled", run.runID, seq)
		}
		dbFires := fires[seq]
		if len(dbFires) > 1 && fired[seq] <= 1 {
			c.f.DoubleTimerFires++
			c.violate("run %s: timer %d fired %d times by the database's record", run.runID, seq, len(dbFires))
		}
		for _, at := range dbFires {
			if at.Before(due) {
				c.f.EarlyTimerFires++
				c.violate("run %s: timer %d due %s fired at %s by the database clock: %s early", run.runID, seq, due.Format(time.RFC3339Nano), at.Format(time.RFC3339Nano), due.Sub(at))
			}
		}
	}
}

// checkWorkflows checks that every workflow the driver started has one
// run, completed with the result its input implies.
func (c *checker) checkWorkflows(ctx context.Context, pool *pgxpool.Pool, runs map[string]*runFacts) error {
	byWorkflow := map[string][]*runFacts{}
	for _, r := range runs {
		byWorkflow[r.workflowID] = append(byWorkflow[r.workflowID], r)
	}
	rows, err := pool.Query(ctx, `SELECT workflow_id, input FROM chaos_workflows ORDER BY created_at`)
	if err != nil {
		return fmt.Errorf("check: list workflows: %w", err)
	}
	var (
		id  string
		raw []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &raw}, func() error {
		c.f.Workflows++
		var in FlowInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return fmt.Errorf("input of %s: %w", id, err)
		}
		rs := byWorkflow[id]
		switch {
		case len(rs) == 0:
			c.f.Lost++
			c.violate("workflow %s: no run at all", id)
			return nil
		case len(rs) > 1:
			c.violate("workflow %s: %d runs, want 1", id, len(rs))
		}
		r := rs[0]
		c.f.SignalsDeliveredTwice += max(r.signals-len(in.Signals), 0)
		if r.status != "completed" {
			c.f.Lost++
			c.violate("workflow %s: run %s is %s, want completed", id, r.runID, r.status)
			return nil
		}
		var got FlowResult
		if err := json.Unmarshal(r.result, &got); err != nil || got != Expected(in) {
			c.f.Lost++
			c.violate("workflow %s: run %s returned %s, want %+v", id, r.runID, r.result, Expected(in))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: workflows: %w", err)
	}
	return nil
}

// execution is one row of the ledger.
type execution struct {
	kind, key          string
	attempt, pid       int
	started, createdAt time.Time
}

// checkLedger explains every execution after the first of its
// idempotency key by what happened to the one before it: its worker was
// killed or paused, the database went away or dropped connections, or its
// worker logged that the write of its outcome was lost or refused (its
// lease had expired).
func (c *checker) checkLedger(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `
SELECT kind, idempotency_key, attempt, pid, started_at, created_at FROM chaos_ledger
ORDER BY idempotency_key, attempt, created_at`)
	if err != nil {
		return fmt.Errorf("check: read the ledger: %w", err)
	}
	var (
		x    execution
		prev *execution
	)
	_, err = pgx.ForEachRow(rows, []any{&x.kind, &x.key, &x.attempt, &x.pid, &x.started, &x.createdAt}, func() error {
		c.f.Executions++
		cur := x
		if prev != nil && prev.key == cur.key {
			c.f.DuplicateExecutions++
			if why := c.explain(*prev, cur); why != "" {
				c.f.Explained[why]++
			} else {
				c.f.Unexplained++
				c.violate("activity %s (%s): attempt %d (pid %d, effect at %s) ran again as attempt %d (pid %d, effect at %s), and no kill, pause, database fault or lost write of the first explains it",
					cur.key, cur.kind, prev.attempt, prev.pid, prev.createdAt.Format(time.RFC3339Nano), cur.attempt, cur.pid, cur.createdAt.Format(time.RFC3339Nano))
			}
		}
		prev = &cur
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read the ledger: %w", err)
	}
	return nil
}

// explain returns why b ran after a had applied its effect, or "".
func (c *checker) explain(a, b execution) string {
	// One claim ran twice: nothing explains that. Attempt 1 may run again
	// as attempt 1: an attempt that ran ahead of its schedule
	// (engine.Options.ActivityRunAhead) holds no claim, and runs again if
	// the schedule did not commit, for a reason found below.
	if b.attempt < a.attempt || (b.attempt == a.attempt && a.attempt != 1) {
		return ""
	}
	from, to := a.started, a.createdAt
	if b.createdAt.After(to) {
		to = b.createdAt
	}
	overlaps := func(f Fault) bool { return !f.Until.Before(from) && !f.At.After(to) }
	// A worker killed or paused up to a lease after b ran may have been
	// too slow to record a's outcome before its lease ran out, and then
	// ended before it could log the refusal.
	hitWorker := func(f Fault) bool { return !f.Until.Before(from) && !f.At.After(to.Add(c.lease)) }
	why := ""
	for _, f := range c.faults {
		var w string
		switch f.Kind {
		case FaultKill, FaultKillAll:
			if f.PID == a.pid && hitWorker(f) {
				w = "kill"
			}
		case FaultPause:
			if f.PID == a.pid && hitWorker(f) {
				w = "pause"
			}
		case FaultStopFast, FaultStopCrash, FaultConnKill:
			if overlaps(f) {
				w = "postgres"
			}
		}
		// The worker's own fault beats a database fault in the report.
		if w != "" && (why == "" || why == "postgres") {
			why = w
		}
	}
	if why != "" {
		return why
	}
	if why := c.logs.lostByKey[keyAttempt{a.pid, a.key, a.attempt}]; why != "" {
		return why
	}
	// b itself ran ahead of its schedule on a claim that was no longer its
	// worker's (its task ran late), and its worker logged that the
	// schedule did not commit.
	if b.attempt == 1 && c.logs.droppedAhead[keyAttempt{b.pid, b.key, b.attempt}] {
		return "dropped_ahead"
	}
	for _, id := range c.taskKeys[a.key] {
		if why := c.logs.lostByTask[taskAttempt{a.pid, id, a.attempt}]; why != "" {
			return why
		}
	}
	return ""
}

// checkExactlyOnce checks that each exactly-once activity of a completed
// run applied its effect exactly once, and none more than once.
func (c *checker) checkExactlyOnce(ctx context.Context, pool *pgxpool.Pool, runs map[string]*runFacts) error {
	counts := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT idempotency_key, count(*) FROM chaos_effects GROUP BY 1`)
	if err != nil {
		return fmt.Errorf("check: read effects: %w", err)
	}
	var (
		key string
		n   int
	)
	if _, err := pgx.ForEachRow(rows, []any{&key, &n}, func() error { counts[key] = n; return nil }); err != nil {
		return fmt.Errorf("check: read effects: %w", err)
	}
	recorded := map[string]bool{}
	rows, err = pool.Query(ctx, `SELECT idempotency_key FROM durable_effects`)
	if err != nil {
		return fmt.Errorf("check: read durable_effects: %w", err)
	}
	if _, err := pgx.ForEachRow(rows, []any{&key}, func() error { recorded[key] = true; return nil }); err != nil {
		return fmt.Errorf("check: read durable_effects: %w", err)
	}
	for key, n := range counts {
		c.f.ExactlyOnceEffects += n
		if n > 1 {
			c.f.ExactlyOnceViolations++
			c.violate("exactly-once key %s: effect applied %d times", key, n)
		}
		if !recorded[key] {
			c.f.ExactlyOnceViolations++
			c.violate("exactly-once key %s: effect applied but durable_effects has no row for it", key)
		}
	}
	for _, r := range runs {
		if r.status != "completed" {
			continue
		}
		for _, key := range r.effectKeys {
			if counts[key] == 0 {
				c.f.ExactlyOnceViolations++
				c.violate("exactly-once key %s: run %s completed but the effect was never applied", key, r.runID)
			}
		}
	}
	err = pool.QueryRow(ctx, `
SELECT coalesce(sum(n - 1), 0) FROM (SELECT count(*) AS n FROM chaos_ledger WHERE kind = 'effect' GROUP BY idempotency_key) s`).Scan(&c.f.ExactlyOnceAbsorbed)
	if err != nil {
		return fmt.Errorf("check: count absorbed deliveries: %w", err)
	}
	return nil
}

// checkLeftovers checks that nothing is left claimed, ready or waiting.
func (c *checker) checkLeftovers(ctx context.Context, pool *pgxpool.Pool) error {
	var wt, at, tm, open int
	err := pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM durable_workflow_tasks), (SELECT count(*) FROM durable_activity_tasks),
       (SELECT count(*) FROM durable_timers), (SELECT count(*) FROM durable_runs WHERE status = 'running')`).Scan(&wt, &at, &tm, &open)
	if err != nil {
		return fmt.Errorf("check: count leftovers: %w", err)
	}
	c.f.Leftover = wt + at + tm + open
	if c.f.Leftover > 0 {
		var parts []string
		for _, p := range []struct {
			n    int
			what string
		}{{wt, "workflow tasks"}, {at, "activity tasks"}, {tm, "timers"}, {open, "open runs"}} {
			if p.n > 0 {
				parts = append(parts, fmt.Sprintf("%d %s", p.n, p.what))
			}
		}
		c.violate("left behind: %s", strings.Join(parts, ", "))
	}
	return nil
}

// sortFaults orders faults by time.
func sortFaults(fs []Fault) {
	slices.SortFunc(fs, func(a, b Fault) int { return cmp.Compare(a.At.UnixNano(), b.At.UnixNano()) })
}

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

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
)

// Findings are what the checker counted, and the violations it found. A
// workload that lost nothing has no violations.
type Findings struct {
	// Workflows the driver started, by kind, and Runs in the database.
	Workflows int          `json:"workflows"`
	Kinds     map[Kind]int `json:"kinds"`
	Runs      int          `json:"runs"`
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
	// SignalsAccepted counts the signals to Drain runs whose Signal call
	// returned nil, and SignalsRefusedClosed those it refused because the
	// run had closed. LostSignals counts the accepted signals, and those
	// in history before the run closed, that the run's result does not
	// count. FirstSignalMissed counts Drain runs whose first task did not
	// see the signal SignalWithStart sent with the start.
	SignalsAccepted      int `json:"signals_accepted"`
	SignalsRefusedClosed int `json:"signals_refused_closed"`
	LostSignals          int `json:"lost_signals"`
	FirstSignalMissed    int `json:"first_signal_missed"`
	// UndecodableSignals counts signals in history that the workers'
	// payload key does not decode: a signal from the wrong-key engine got in.
	UndecodableSignals int `json:"undecodable_signals"`
	// BadTextRuns counts Fail runs that ended failed with their text
	// escaped; BadTextLostToFaults those whose activity's attempts were
	// lost to faults first, so that they failed with a timeout;
	// BadTextViolations the others.
	BadTextRuns         int `json:"bad_text_runs"`
	BadTextViolations   int `json:"bad_text_violations"`
	BadTextLostToFaults int `json:"bad_text_lost_to_faults"`
	// SpinRunsChecked counts the terminated runs of code that never
	// yields; SpinViolations those that are not terminated, or recorded
	// anything of their code.
	SpinRunsChecked int `json:"spin_runs_checked"`
	SpinViolations  int `json:"spin_violations"`
	// VersionedRuns counts Versioned runs, NewBranchRuns those on the new
	// branch and UpgradedMidRun those whose activities were scheduled by
	// both generations of the code; VersionViolations those whose result
	// or branches are wrong.
	VersionedRuns     int `json:"versioned_runs"`
	NewBranchRuns     int `json:"new_branch_runs"`
	UpgradedMidRun    int `json:"upgraded_mid_run"`
	VersionViolations int `json:"version_violations"`
	// TimerClockViolations counts timers whose due time was not set from
	// the database's clock (the engine's clock was more than a lease
	// behind it or a second ahead of it when the timer started).
	TimerClockViolations int `json:"timer_clock_violations"`
	// TimerClockPaused counts the timers whose due time came from a task
	// whose worker was paused (SIGSTOP), or whose database went away (a
	// restart, a killed connection), between the task's time and its
	// commit: such a commit comes late, on its task's time, and is
	// accepted while no other worker has claimed the task (its token
	// holds); the workflow's clock says the timer started at that time.
	TimerClockPaused int `json:"timer_clock_paused"`
	// What the fencing checks read from the database: outcomes, heartbeats,
	// commits and claims; StaleAccepted the writes accepted from a claim
	// or attempt that did not hold the row; EarlyClaims the claims of a
	// row whose lease or retry delay had not run out by the database clock.
	OutcomesChecked   int `json:"outcomes_checked"`
	HeartbeatsChecked int `json:"heartbeats_checked"`
	CommitsChecked    int `json:"commits_checked"`
	ClaimsChecked     int `json:"claims_checked"`
	StaleAccepted     int `json:"stale_writes_accepted"`
	EarlyClaims       int `json:"early_claims"`
	// Leftover counts task and timer rows left behind, and runs still open.
	Leftover int `json:"leftover"`
	// Violations describe each problem found, one line each.
	Violations []string `json:"violations"`
}

// maxViolationLines bounds how many violations are described, and
// maxViolationsAlike how many of one kind (one format), so that a flood of
// one kind leaves room for the others; the counts go on.
const (
	maxViolationLines  = 400
	maxViolationsAlike = 20
)

type checker struct {
	f      Findings
	faults []Fault
	logs   *workerLogs
	lease  time.Duration
	codec  codec.PayloadCodec
	// taskKeys maps an idempotency key to its activity task ids.
	taskKeys map[string][]int64
	// ledgerRuns counts the ledger's idempotency keys by run.
	ledgerRuns map[string]int
	// alike counts the violations described, by format.
	alike map[string]int
}

// checkInput is what the checker needs besides the database.
type checkInput struct {
	faults []Fault
	logs   *workerLogs
	// lease is the workers' lease.
	lease time.Duration
	// codec decodes the payloads; nil for plain JSON.
	codec codec.PayloadCodec
}

func (c *checker) violate(format string, args ...any) {
	if c.alike == nil {
		c.alike = map[string]int{}
	}
	c.alike[format]++
	switch n := c.alike[format]; {
	case len(c.f.Violations) > maxViolationLines:
	case len(c.f.Violations) == maxViolationLines:
		c.f.Violations = append(c.f.Violations, "... (more violations; the counts are complete)")
	case n <= maxViolationsAlike:
		c.f.Violations = append(c.f.Violations, fmt.Sprintf(format, args...))
	case n == maxViolationsAlike+1:
		c.f.Violations = append(c.f.Violations, fmt.Sprintf("... (more violations like the one above, %.60q; the counts are complete)", format))
	}
}

func check(ctx context.Context, pool *pgxpool.Pool, in checkInput) (Findings, error) {
	c := &checker{
		f:      Findings{Explained: map[string]int{}, Kinds: map[Kind]int{}},
		faults: in.faults, logs: in.logs, lease: in.lease, codec: in.codec, taskKeys: map[string][]int64{},
	}
	replayer, err := engine.NewReplayer(engine.ReplayerOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Codec: in.codec})
	if err != nil {
		return c.f, err
	}
	// The replayer runs the second generation of the code, which must
	// replay what the first recorded.
	if err := (&workload{lease: time.Second, gen: 2, replay: true}).register(replayer); err != nil {
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
	for _, fn := range []func(context.Context, *pgxpool.Pool) error{c.checkOutcomes, c.checkCommits, c.checkHeartbeats, c.checkClaims} {
		if err := fn(ctx, pool); err != nil {
			return c.f, err
		}
	}
	return c.f, nil
}

func (c *checker) loadTaskKeys(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT task_id, idempotency_key FROM chaos_act_log WHERE op = 'insert'`)
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
	// failure is the message of a failed run.
	failure string
	// closeResult is the result its closing event holds.
	closeResult json.RawMessage
	// effectKeys are the idempotency keys of its exactly-once activities.
	effectKeys []string
	// signals counts Flow's signals; drained lists the indices of Drain's,
	// in history order.
	signals int
	drained []int
	// scheduled counts its activities; markers its version markers.
	scheduled, markers int
	// last is the type of its last event.
	last string
}

const listRunsSQL = `
SELECT run_id::text, workflow_id, workflow_type, status, result, coalesce(failure->>'message', ''), next_event_id FROM durable_runs`

const listAllEventsSQL = `
SELECT run_id::text, event_id, type, attributes, created_at FROM durable_events ORDER BY run_id, event_id`

// checkRuns checks each run's history: IDs 1..n, a clean replay, one
// completion per activity, timers fired once and never early.
func (c *checker) checkRuns(ctx context.Context, pool *pgxpool.Pool, replayer *engine.Replayer) (map[string]*runFacts, error) {
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
	_, err = pgx.ForEachRow(rows, []any{&r.runID, &r.workflowID, &r.workflowType, &r.status, &r.result, &r.failure, &r.nextEventID}, func() error {
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
	starts, err := c.timerStarts(ctx, pool)
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
			c.checkRun(ctx, replayer, &run.runFacts, run.workflowType, run.nextEventID, evs, timerFacts{fires[cur], starts[cur]})
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
func (c *checker) checkRun(ctx context.Context, replayer *engine.Replayer, run *runFacts, workflowType string, nextEventID int64, evs []history.Event, timers timerFacts) {
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
	// Replay compares what the code returns (result, failure, input to
	// continue with) with the closing event, not only the commands.
	h := history.History{Version: history.FormatVersion, WorkflowID: run.workflowID, RunID: run.runID, WorkflowType: workflowType, Events: evs}
	if err := replayer.Replay(ctx, h); err != nil {
		c.f.ReplayFailures++
		c.violate("run %s (%s): history does not replay: %v", run.runID, run.workflowID, err)
	}
	c.checkHistory(run, evs, timers)
}

// timerFacts are the database's times of a run's timers, by seq: when
// each fired, and when it was started (its row inserted) and the due time
// the row holds.
type timerFacts struct {
	fires  map[int64][]timerFire
	starts map[int64]timerStart
}

// timerFire is a timer's fire by the database clock, and who fired it.
type timerFire struct {
	at time.Time
	by string
}

type timerStart struct {
	fireAt, at time.Time
	writer     string // the session that inserted the timer (its application_name)
}

// timerStarts reads when each timer was started, by the database clock.
func (c *checker) timerStarts(ctx context.Context, pool *pgxpool.Pool) (map[string]map[int64]timerStart, error) {
	rows, err := pool.Query(ctx, `SELECT run_id::text, seq, fire_at, started_at, writer FROM chaos_timer_starts`)
	if err != nil {
		return nil, fmt.Errorf("check: read timer starts: %w", err)
	}
	out := map[string]map[int64]timerStart{}
	var (
		runID string
		seq   int64
		ts    timerStart
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &seq, &ts.fireAt, &ts.at, &ts.writer}, func() error {
		if out[runID] == nil {
			out[runID] = map[int64]timerStart{}
		}
		out[runID][seq] = ts
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read timer starts: %w", err)
	}
	return out, nil
}

func idRange(evs []history.Event) string {
	if len(evs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", evs[0].ID, evs[len(evs)-1].ID)
}

// timerFires reads when each timer fired by the database clock (the
// trigger's clock_timestamp()), by run and seq.
func (c *checker) timerFires(ctx context.Context, pool *pgxpool.Pool) (map[string]map[int64][]timerFire, error) {
	rows, err := pool.Query(ctx, `SELECT run_id::text, seq, fired_at, writer FROM chaos_timer_fires`)
	if err != nil {
		return nil, fmt.Errorf("check: read timer fires: %w", err)
	}
	out := map[string]map[int64][]timerFire{}
	var (
		runID string
		seq   int64
		f     timerFire
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &seq, &f.at, &f.by}, func() error {
		if out[runID] == nil {
			out[runID] = map[int64][]timerFire{}
		}
		out[runID][seq] = append(out[runID][seq], f)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read timer fires: %w", err)
	}
	return out, nil
}

// checkHistory checks one gap-free history: completions, timers, what
// follows the close, and that every signal decodes.
func (c *checker) checkHistory(run *runFacts, evs []history.Event, tf timerFacts) {
	closed := run.status == "completed"
	scheduled := map[int64]string{}
	completions := map[int64]int{}
	timers := map[int64]history.Event{}
	fired := map[int64]int{}
	canceled := map[int64]bool{}
	closedAt := int64(0)
	for _, e := range evs {
		if closedAt != 0 {
			c.violate("run %s: event %d (%s) follows the event %d that closed the run", run.runID, e.ID, e.Attributes.EventType(), closedAt)
		}
		run.last = e.Attributes.EventType()
		switch a := e.Attributes.(type) {
		case history.WorkflowCompleted:
			run.closeResult = a.Result
			closedAt = e.ID
		case history.WorkflowFailed, history.WorkflowCanceled, history.WorkflowTerminated, history.WorkflowContinuedAsNew:
			closedAt = e.ID
		case history.ActivityScheduled:
			run.scheduled++
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
		case history.VersionMarker:
			run.markers++
		case history.SignalReceived:
			c.noteSignal(run, e.ID, a)
		case history.TimerStarted:
			timers[a.Seq] = e
		case history.TimerCanceled:
			canceled[a.Seq] = true
		case history.TimerFired:
			c.f.TimersFired++
			fired[a.Seq]++
			started, ok := timers[a.Seq]
			switch {
			case !ok:
				c.violate("run %s: event %d fires timer %d, which was never started", run.runID, e.ID, a.Seq)
			case e.Time.Before(started.Attributes.(history.TimerStarted).FireAt):
				due := started.Attributes.(history.TimerStarted).FireAt
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
	for seq, started := range timers {
		due := started.Attributes.(history.TimerStarted).FireAt
		if fired[seq] > 1 {
			c.f.DoubleTimerFires++
			c.violate("run %s: timer %d fired %d times in history", run.runID, seq, fired[seq])
		}
		if closed && fired[seq] == 0 && !canceled[seq] {
			c.violate("run %s completed but timer %d neither fired nor was canceled", run.runID, seq)
		}
		dbFires := tf.fires[seq]
		if len(dbFires) > 1 && fired[seq] <= 1 {
			c.f.DoubleTimerFires++
			c.violate("run %s: timer %d fired %d times by the database's record", run.runID, seq, len(dbFires))
		}
		for _, f := range dbFires {
			if f.at.Before(due) {
				c.f.EarlyTimerFires++
				c.violate("run %s: timer %d due %s fired at %s by the database clock: %s early (fired by %s)",
					run.runID, seq, due.Format(time.RFC3339Nano), f.at.Format(time.RFC3339Nano), due.Sub(f.at), f.by)
			}
		}
		c.checkTimerClock(run, seq, started, tf.starts)
	}
}

// checkTimerClock checks that a timer's due time was set on the database's
// clock: the time it asked for (its due time less its event's time, both
// the engine's) must be about what remained of it, by the database clock,
// when its row was inserted. A commit comes up to a lease after the
// task's time, so a due time up to a lease short is the engine's clock
// being on time; more than that, or more than a second long, is a clock
// off the database's, unless the writing worker was paused or its database
// went away in between (TimerClockPaused).
func (c *checker) checkTimerClock(run *runFacts, seq int64, started history.Event, starts map[int64]timerStart) {
	st, ok := starts[seq]
	if !ok {
		return // started before the trigger, or by a test's hand
	}
	asked := started.Attributes.(history.TimerStarted).FireAt.Sub(started.Time)
	left := st.fireAt.Sub(st.at)
	if left < asked-c.lease {
		if why := c.faultDuring(pidOfWorker(st.writer), started.Time, st.at); why == "pause" || why == "postgres" {
			c.f.TimerClockPaused++
			return
		}
	}
	if left < asked-c.lease || left > asked+time.Second {
		c.f.TimerClockViolations++
		c.violate("run %s: timer %d asked for %s, but its due time was %s after the database's time at its start: the engine's clock is %s off the database's",
			run.runID, seq, asked, left, left-asked)
	}
}

// noteSignal decodes a signal of run's history, with the workers' key.
func (c *checker) noteSignal(run *runFacts, id int64, a history.SignalReceived) {
	raw, err := codec.Unwrap(c.codec, a.Payload)
	var s Signal
	if err == nil && (a.Name == signalName || a.Name == drainSignal) {
		err = json.Unmarshal(raw, &s)
	}
	if err != nil {
		c.f.UndecodableSignals++
		c.violate("run %s: signal %q at event %d does not decode with the workers' payload key: %v", run.runID, a.Name, id, err)
		return
	}
	switch a.Name {
	case signalName:
		run.signals++
	case drainSignal:
		run.drained = append(run.drained, s.Index)
	}
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

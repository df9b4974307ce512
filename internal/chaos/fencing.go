package chaos

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/codec"
)

// The fencing checks read what the database accepted, from the rig's
// triggers (schema.go), not what the workers logged: every write that
// changed a task row or appended a task's events must belong to the claim
// or attempt that held the row at that moment, and every claim must have
// taken a row that was free by the database's clock. A write fencing let
// through would show here whether or not anyone logged it.

// commandTypes are the event types only a workflow task's commit appends.
var commandTypes = []string{
	"activity_scheduled", "activity_canceled", "timer_started", "timer_canceled", "side_effect_recorded",
	"version_marker", "child_workflow_scheduled", "workflow_task_completed",
	"workflow_completed", "workflow_failed", "workflow_canceled", "workflow_continued_as_new",
}

// carrierCTE finds, for each transaction that appended events to a run,
// what carried them: the workflow-task row it ended (deleted or released:
// its holder, and who wrote), the activity-task rows it deleted (holder
// and writer of each: an outcome, which may carry the next step of the
// run with it, a fused step), the timers it fired (who fired them: a
// fired timer may carry the step it wakes, a fused wake), and the types
// of the events.
const carrierCTE = `
WITH g AS (
    SELECT run_id, xmin::text::bigint AS xid, array_agg(DISTINCT type) AS types, min(event_id) AS first_event
    FROM durable_events GROUP BY 1, 2
), d AS (
    SELECT run_id, xid, array_agg(coalesce(old_holder, '') || '|' || writer) AS dels
    FROM chaos_act_log WHERE op = 'delete' GROUP BY 1, 2
), f AS (
    SELECT run_id, xid, min(writer) AS writer FROM chaos_timer_fires GROUP BY 1, 2
), carrier AS (
    SELECT g.run_id, g.xid, g.types, g.first_event, coalesce(w.op, '') AS w_op, coalesce(w.old_holder, '') AS w_holder,
        coalesce(w.writer, '') AS w_writer, coalesce(d.dels, '{}') AS dels, coalesce(f.writer, '') AS f_writer
    FROM g
    LEFT JOIN chaos_wt_log w ON w.run_id = g.run_id AND w.xid = g.xid AND w.op IN ('delete', 'release')
    LEFT JOIN d ON d.run_id = g.run_id AND d.xid = g.xid
    LEFT JOIN f ON f.run_id = g.run_id AND f.xid = g.xid
)`

// carrier is what carried one transaction's events to a run.
type carrier struct {
	types                 []string
	wOp, wHolder, wWriter string
	dels                  []string // holder|writer of each activity task deleted
	fWriter               string
}

// claim returns the claim under which the transaction wrote, and who
// wrote: the workflow task's (or, for a fused step, the activity's) holder
// and the writer; how names which; ok is false if nothing carried it.
// A fused wake is fenced by its timer's one fire, and a run's first
// events by the run's creation: their writer stands for the holder.
func (c carrier) claim() (holder, writer, how string, ok bool) {
	switch {
	case c.wOp != "":
		return c.wHolder, c.wWriter, "its workflow task", true
	case len(c.dels) > 0:
		for _, d := range c.dels {
			if h, w, _ := strings.Cut(d, "|"); h != "" {
				return h, w, "the activity task whose outcome carried it", true
			}
		}
		h, w, _ := strings.Cut(c.dels[0], "|")
		return h, w, "the activity task whose outcome carried it", true
	case c.fWriter != "":
		return c.fWriter, c.fWriter, "the timer it fired", true
	case slices.Contains(c.types, "workflow_started"):
		return "", "", "the run's start", true
	}
	return "", "", "", false
}

// outcomesSQL lists every activity outcome in history with what the same
// transaction did to the activity's task row (its delete: the attempt and
// holder it had, and the session that wrote), whether the same
// transaction scheduled the activity (an attempt that ran ahead and
// committed with its schedule: no task row) and what carried that
// transaction, and the workers (pids) the ledger says ran that attempt.
const outcomesSQL = carrierCTE + `, o AS (
    SELECT e.run_id, e.event_id, e.type, e.xmin::text::bigint AS xid, (e.attributes->>'seq')::bigint AS seq,
        coalesce((e.attributes->>'attempt')::int, (e.attributes->'failure'->>'attempts')::int, 0) AS attempt
    FROM durable_events e WHERE e.type IN ('activity_completed', 'activity_failed')
), s AS (
    SELECT e.run_id, e.xmin::text::bigint AS xid, (e.attributes->>'seq')::bigint AS seq
    FROM durable_events e WHERE e.type = 'activity_scheduled'
)
SELECT o.run_id::text, o.event_id, o.type, o.seq, o.attempt,
    d.old_attempt, coalesce(d.old_holder, ''), coalesce(d.writer, ''), d.task_id IS NOT NULL, s.seq IS NOT NULL,
    k.types, k.w_op, k.w_holder, k.w_writer, k.dels, k.f_writer,
    coalesce((SELECT array_agg(l.pid) FROM chaos_ledger l
              WHERE l.idempotency_key = o.run_id::text || ':' || o.seq AND l.attempt = o.attempt), '{}')
FROM o
JOIN carrier k ON k.run_id = o.run_id AND k.xid = o.xid
LEFT JOIN chaos_act_log d ON d.op = 'delete' AND d.run_id = o.run_id AND d.seq = o.seq AND d.xid = o.xid
LEFT JOIN s ON s.run_id = o.run_id AND s.seq = o.seq AND s.xid = o.xid`

// checkOutcomes checks that each activity outcome in history was written
// by the attempt that held the task: its attempt is the row's, its writer
// the row's holder, and (for a completion) the ledger shows that attempt
// ran in the holder's process. An attempt that ran ahead of its schedule
// and committed with it has no row: it must be attempt 1, written under
// the claim that carried the commit, by its holder.
func (c *checker) checkOutcomes(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, outcomesSQL)
	if err != nil {
		return fmt.Errorf("check: read outcomes: %w", err)
	}
	var (
		runID, typ, holder, writer string
		eventID, seq               int64
		attempt                    int
		oldAttempt                 *int
		deleted, fused             bool
		k                          carrier
		pids                       []int32
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &eventID, &typ, &seq, &attempt, &oldAttempt, &holder, &writer, &deleted, &fused,
		&k.types, &k.wOp, &k.wHolder, &k.wWriter, &k.dels, &k.fWriter, &pids}, func() error {
		c.f.OutcomesChecked++
		what := fmt.Sprintf("run %s event %d (%s of activity seq %d, attempt %d)", runID, eventID, typ, seq, attempt)
		ranIn := func(who string) {
			if typ == "activity_completed" && !slices.Contains(pids, int32(pidOfWorker(who))) {
				c.staleAccepted("%s: accepted from %s, but the ledger has that attempt run by %v, not by that worker", what, who, pids)
			}
		}
		switch {
		case deleted:
			// A failure counts the attempts that ran: one less than the
			// row's when the last attempt's lease ran out and the next
			// claim found no attempts left.
			ok := oldAttempt == nil || attempt == 0 || *oldAttempt == attempt || typ == "activity_failed" && *oldAttempt == attempt+1
			switch {
			case !ok:
				c.staleAccepted("%s: accepted while attempt %d held the task", what, *oldAttempt)
			case holder != "" && writer != holder:
				c.staleAccepted("%s: written by %s while %s held the task", what, writer, holder)
			default:
				ranIn(writer)
			}
		case fused:
			holder, writer, how, ok := k.claim()
			switch {
			case attempt != 1:
				c.staleAccepted("%s: committed with its schedule, so it must be attempt 1", what)
			case !ok || holder == "" || writer != holder:
				c.staleAccepted("%s: committed with its schedule by %q while %q held %s", what, writer, holder, cmp.Or(how, "nothing"))
			default:
				ranIn(writer)
			}
		default:
			c.staleAccepted("%s: recorded by a transaction that neither ended the task's claim nor scheduled it", what)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read outcomes: %w", err)
	}
	return nil
}

func (c *checker) staleAccepted(format string, args ...any) {
	c.f.StaleAccepted++
	c.violate("fencing: "+format, args...)
}

// checkCommits checks that each transaction that appended a workflow
// task's commands was carried by a claim and written by its holder.
// Terminations append a closing event of their own and are left out.
func (c *checker) checkCommits(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, carrierCTE+`
SELECT run_id::text, first_event, types, w_op, w_holder, w_writer, dels, f_writer FROM carrier`)
	if err != nil {
		return fmt.Errorf("check: read commits: %w", err)
	}
	var (
		runID string
		first int64
		k     carrier
	)
	_, err = pgx.ForEachRow(rows, []any{&runID, &first, &k.types, &k.wOp, &k.wHolder, &k.wWriter, &k.dels, &k.fWriter}, func() error {
		if slices.Contains(k.types, "workflow_terminated") || !slices.ContainsFunc(k.types, func(t string) bool { return slices.Contains(commandTypes, t) }) {
			return nil
		}
		c.f.CommitsChecked++
		holder, writer, how, ok := k.claim()
		switch {
		case !ok:
			c.staleAccepted("run %s: events from %d (%v) committed under no claim: no workflow task, activity outcome, timer fire or start in their transaction", runID, first, k.types)
		case how == "the run's start":
		case holder == "":
			c.staleAccepted("run %s: events from %d (%v) committed by %s on %s, which nobody held", runID, first, k.types, writer, how)
		case writer != holder:
			c.staleAccepted("run %s: events from %d (%v) committed by %s while %s held %s", runID, first, k.types, writer, holder, how)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read commits: %w", err)
	}
	return nil
}

// checkHeartbeats checks that each heartbeat the database accepted came
// from the attempt that held the task, and the releases (a failed attempt
// given back, a worker's claims at shutdown) from its holder.
func (c *checker) checkHeartbeats(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `
SELECT op, task_id, idempotency_key, attempt, coalesce(holder, ''), coalesce(old_holder, ''), writer, heartbeat
FROM chaos_act_log WHERE op IN ('heartbeat', 'release')`)
	if err != nil {
		return fmt.Errorf("check: read heartbeats: %w", err)
	}
	var (
		op, key, holder, oldHolder, writer string
		task                               int64
		attempt                            int
		details                            []byte
	)
	_, err = pgx.ForEachRow(rows, []any{&op, &task, &key, &attempt, &holder, &oldHolder, &writer, &details}, func() error {
		what := fmt.Sprintf("activity %s (task %d) attempt %d", key, task, attempt)
		if op == "release" {
			if writer != oldHolder {
				c.staleAccepted("%s: its claim was given back by %s while %s held it", what, writer, oldHolder)
			}
			return nil
		}
		c.f.HeartbeatsChecked++
		if writer != oldHolder || holder != oldHolder {
			c.staleAccepted("%s: heartbeat written by %s while %s held the task", what, writer, oldHolder)
			return nil
		}
		if len(details) == 0 {
			return nil
		}
		var p BeatProgress
		raw, err := codec.Unwrap(c.codec, details)
		if err == nil {
			err = json.Unmarshal(raw, &p)
		}
		switch {
		case err != nil:
			c.violate("%s: heartbeat details do not decode: %v", what, err)
		case p.Attempt != 0 && (p.Attempt != attempt || p.PID != pidOfWorker(holder)):
			c.staleAccepted("%s: heartbeat of attempt %d (pid %d) accepted while attempt %d (%s) held the task", what, p.Attempt, p.PID, attempt, holder)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read heartbeats: %w", err)
	}
	return nil
}

// claimsSQL lists the claims that took a task row before it was free by
// the database clock, by more than $1: a lease that had not run out, or
// (for an activity attempt after the first, and for a workflow task) a
// retry delay that had not. A worker whose clock runs ahead of the
// database's does this unless the engine takes its times from the
// database.
const claimsSQL = `
SELECT 'activity', idempotency_key, attempt, holder, coalesce(old_holder, ''), old_locked_until, old_run_after, at
FROM chaos_act_log
WHERE op = 'claim' AND (old_holder IS NOT NULL AND old_locked_until > at + $1::interval
                        OR old_holder IS NULL AND old_attempt > 0 AND old_run_after > at + $1::interval)
UNION ALL
SELECT 'workflow', run_id::text, token::int, holder, coalesce(old_holder, ''), old_locked_until, old_run_after, at
FROM chaos_wt_log
WHERE op = 'claim' AND (old_holder IS NOT NULL AND old_locked_until > at + $1::interval OR old_holder IS NULL AND old_run_after > at + $1::interval)`

// clockTolerance is how far apart two clocks on one machine may read (a
// process's and the server's): the claims test found the engine's clock a
// third of a millisecond ahead of clock_timestamp() read after it.
const clockTolerance = 50 * time.Millisecond

// checkClaims checks that every claim took a free row, by the database
// clock.
func (c *checker) checkClaims(ctx context.Context, pool *pgxpool.Pool) error {
	err := pool.QueryRow(ctx, `
SELECT (SELECT count(*) FROM chaos_act_log WHERE op = 'claim') + (SELECT count(*) FROM chaos_wt_log WHERE op = 'claim')`).Scan(&c.f.ClaimsChecked)
	if err != nil {
		return fmt.Errorf("check: count claims: %w", err)
	}
	rows, err := pool.Query(ctx, claimsSQL, clockTolerance)
	if err != nil {
		return fmt.Errorf("check: read claims: %w", err)
	}
	var (
		kind, key, holder, oldHolder string
		n                            int
		until, after                 *time.Time
		at                           time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&kind, &key, &n, &holder, &oldHolder, &until, &after, &at}, func() error {
		c.f.EarlyClaims++
		if oldHolder != "" {
			c.violate("claim: %s task %s claimed by %s at %s while %s's lease ran until %s (%s later, by the database clock)",
				kind, key, holder, at.Format(time.RFC3339Nano), oldHolder, until.Format(time.RFC3339Nano), until.Sub(at))
		} else {
			c.violate("claim: %s task %s claimed by %s at %s before its retry time %s (%s early, by the database clock)",
				kind, key, holder, at.Format(time.RFC3339Nano), after.Format(time.RFC3339Nano), after.Sub(at))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: read claims: %w", err)
	}
	return nil
}

// takeover is a claim that took an activity task over from an earlier
// attempt, as the database recorded it.
type takeover struct {
	oldHolder string
	oldUntil  time.Time
	at        time.Time
}

// keyFacts is what the database recorded of one activity's task: who held
// each attempt, how each attempt was taken over, and when the schedule
// that was recorded committed (by the database clock: the earliest write
// the triggers saw in its transaction).
type keyFacts struct {
	holders   map[int]string    // by attempt
	heldSince map[int]time.Time // by attempt: when its claim was taken
	takeovers map[int]takeover  // by the attempt taken over
	scheduled time.Time
}

// scheduledSQL finds when the recorded schedule of each of the keys
// $1 (run_id:seq) committed.
const scheduledSQL = `
WITH k AS (
    SELECT key, split_part(key, ':', 1)::uuid AS run_id, split_part(key, ':', 2)::bigint AS seq FROM unnest($1::text[]) AS key
), s AS (
    SELECT k.key, e.run_id, e.xmin::text::bigint AS xid
    FROM k JOIN durable_events e ON e.run_id = k.run_id AND e.type = 'activity_scheduled' AND (e.attributes->>'seq')::bigint = k.seq
), t AS (
    SELECT run_id, xid, at FROM chaos_wt_log
    UNION ALL SELECT run_id, xid, at FROM chaos_act_log
    UNION ALL SELECT run_id, xid, fired_at FROM chaos_timer_fires
)
SELECT s.key, min(t.at) FROM s JOIN t ON t.run_id = s.run_id AND t.xid = s.xid GROUP BY s.key`

// loadKeyFacts reads the facts of the given idempotency keys.
func loadKeyFacts(ctx context.Context, pool *pgxpool.Pool, keys []string) (map[string]*keyFacts, error) {
	out := map[string]*keyFacts{}
	if len(keys) == 0 {
		return out, nil
	}
	facts := func(key string) *keyFacts {
		kf := out[key]
		if kf == nil {
			kf = &keyFacts{holders: map[int]string{}, heldSince: map[int]time.Time{}, takeovers: map[int]takeover{}}
			out[key] = kf
		}
		return kf
	}
	rows, err := pool.Query(ctx, `
SELECT idempotency_key, op, attempt, coalesce(old_attempt, 0), coalesce(holder, ''), coalesce(old_holder, ''), old_locked_until, at
FROM chaos_act_log WHERE idempotency_key = ANY($1) AND op IN ('insert', 'claim') ORDER BY id`, keys)
	if err != nil {
		return nil, fmt.Errorf("check: read task facts: %w", err)
	}
	var (
		key, op, holder, oldHolder string
		attempt, oldAttempt        int
		until                      *time.Time
		at                         time.Time
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &op, &attempt, &oldAttempt, &holder, &oldHolder, &until, &at}, func() error {
		kf := facts(key)
		if holder != "" {
			kf.holders[attempt], kf.heldSince[attempt] = holder, at
		}
		if op == "claim" && oldAttempt > 0 {
			t := takeover{oldHolder: oldHolder, at: at}
			if until != nil {
				t.oldUntil = *until
			}
			kf.takeovers[oldAttempt] = t
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read task facts: %w", err)
	}
	rows, err = pool.Query(ctx, scheduledSQL, keys)
	if err != nil {
		return nil, fmt.Errorf("check: read schedule times: %w", err)
	}
	_, err = pgx.ForEachRow(rows, []any{&key, &at}, func() error {
		facts(key).scheduled = at
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read schedule times: %w", err)
	}
	return out, nil
}

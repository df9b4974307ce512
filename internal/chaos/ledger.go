package chaos

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// execution is one row of the ledger.
type execution struct {
	kind, key          string
	attempt, pid       int
	started, createdAt time.Time
}

// checkLedger explains every execution after the first of its
// idempotency key by what happened to the one before it (explain).
func (c *checker) checkLedger(ctx context.Context, pool *pgxpool.Pool) error {
	rows, err := pool.Query(ctx, `SELECT idempotency_key FROM chaos_ledger GROUP BY 1 HAVING count(*) > 1`)
	if err != nil {
		return fmt.Errorf("check: find repeated executions: %w", err)
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("check: find repeated executions: %w", err)
	}
	facts, err := loadKeyFacts(ctx, pool, keys)
	if err != nil {
		return err
	}
	rows, err = pool.Query(ctx, `
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
			if why := c.explain(*prev, cur, facts[cur.key]); why != "" {
				c.f.Explained[why]++
			} else {
				c.f.Unexplained++
				c.violate("activity %s (%s): attempt %d (pid %d, started %s, effect at %s) ran again as attempt %d (pid %d, started %s), and no fault on its worker or connection during it, nor a lost lease the database shows and its worker logged, explains it; %s",
					cur.key, cur.kind, prev.attempt, prev.pid, prev.started.Format(time.RFC3339Nano), prev.createdAt.Format(time.RFC3339Nano),
					cur.attempt, cur.pid, cur.started.Format(time.RFC3339Nano), facts[cur.key].describe(prev.attempt))
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

// describe says what the database recorded of attempt's claim, for a
// violation.
func (kf *keyFacts) describe(attempt int) string {
	if kf == nil {
		return "the database recorded no claim of the task"
	}
	s := fmt.Sprintf("the database recorded attempt %d held by %q", attempt, kf.holders[attempt])
	if t, ok := kf.takeovers[attempt]; ok {
		s += fmt.Sprintf(", taken over at %s from %q, whose lease ran until %s", t.at.Format(time.RFC3339Nano), t.oldHolder, t.oldUntil.Format(time.RFC3339Nano))
	} else {
		s += ", and no claim taking it over"
	}
	if !kf.scheduled.IsZero() {
		s += ", its schedule committed at " + kf.scheduled.Format(time.RFC3339Nano)
	}
	return s
}

// faultSlack widens a fault's window for the clocks of the driver (which
// records faults) and the workers (which record executions): one machine,
// but the times are taken a little before or after the act.
const faultSlack = 50 * time.Millisecond

// explain returns why b ran after a had applied its effect, or "". kf is
// what the database recorded of their task.
//
// A later attempt ran because the claim of a's attempt ended without an
// outcome: the database must show a claim that took the task over from
// the worker that held it after its lease had run out (within
// clockTolerance: the engines' clock is the database's as read over the
// network), or after that worker gave it back (the attempt failed). That worker is a's, or, when a ran ahead of a schedule that
// did not commit, the one whose claim came with the schedule that did.
// What ended that attempt is then a kill or pause of its worker, a server
// stop, or a killed connection of that worker, between its start (or its
// claim) and b's; or its worker logged that its outcome was refused or its
// write failed (or was killed or paused within a lease after b started,
// before it could log it). A log line alone explains nothing.
//
// Attempt 1 may run again as attempt 1: an attempt that ran ahead of its
// schedule (engine.Options.ActivityRunAhead) holds no claim, and runs
// again if the schedule did not commit. The database shows which may have
// been dropped (droppedAhead). It is explained by its worker logging the
// drop, or a fault on its worker, whatever attempt ran the activity next:
// the claim the committed schedule made may have run it as attempt 1, or,
// having lost that attempt, as a later one. Any later attempt running twice
// is one claim run twice, which nothing explains.
func (c *checker) explain(a, b execution, kf *keyFacts) string {
	if kf == nil {
		kf = &keyFacts{}
	}
	switch {
	case a.attempt == 1 && b.attempt > 1:
		// a may have run ahead of a schedule that did not commit: then
		// the activity had to run again, whatever attempt of the
		// committed schedule's claim ran it.
		if why := c.droppedAhead(a, kf); why != "" {
			return why
		}
	}
	switch {
	case b.attempt > a.attempt:
		t, ok := kf.takeovers[a.attempt]
		if !ok {
			return ""
		}
		holder := t.oldHolder
		switch {
		case holder == "":
			// The claim was given back before it was taken: the attempt
			// failed (a write that may have committed, say).
			holder = kf.holders[a.attempt]
		case t.at.Add(clockTolerance).Before(t.oldUntil):
			return "" // taken while its lease held
		}
		held := a
		if p := pidOfWorker(holder); p != a.pid {
			// a ran ahead of a schedule that did not commit (its pair
			// with the attempt that did says so): the attempt that was
			// taken over is the one that held the claim, since it was
			// taken.
			if p == 0 || kf.heldSince[a.attempt].IsZero() {
				return ""
			}
			held = execution{key: a.key, attempt: a.attempt, pid: p, started: kf.heldSince[a.attempt]}
		}
		if why := c.faultDuring(held.pid, held.started, b.started); why != "" {
			return why
		}
		if why := c.loggedLost(held); why != "" {
			return why
		}
		if why := c.faultDuring(held.pid, b.started, b.started.Add(c.lease)); why == "kill" || why == "pause" {
			return "lease_expiry"
		}
		return ""
	case b.attempt == a.attempt && a.attempt == 1:
		for _, x := range []execution{a, b} {
			if why := c.droppedAhead(x, kf); why != "" {
				return why
			}
		}
	}
	return ""
}

// droppedAhead returns why attempt 1's execution x may have been dropped,
// or "": x did not hold attempt 1's claim (another worker held it), or it
// started before the recorded schedule committed (its effect may land
// later: a write its worker gave up on can still commit), and its worker
// logged the drop or had a fault before the recorded schedule committed
// (or within a lease of the attempt).
func (c *checker) droppedAhead(x execution, kf *keyFacts) string {
	holder := pidOfWorker(kf.holders[1])
	if !(holder != 0 && x.pid != holder) && !(!kf.scheduled.IsZero() && x.started.Before(kf.scheduled)) {
		return "" // x held attempt 1's claim, or may have
	}
	if c.logs.droppedAhead[keyAttempt{x.pid, x.key, 1}] {
		return "dropped_ahead"
	}
	// x's own schedule could commit until the recorded one did: a fault
	// on its worker up to then (its commit waiting out a server stop, say)
	// is why it did not.
	until := x.createdAt.Add(c.lease)
	if s := kf.scheduled.Add(c.lease); s.After(until) {
		until = s
	}
	return c.faultDuring(x.pid, x.started, until)
}

// faultDuring returns the kind of fault ("kill", "pause", "postgres") that
// hit worker pid, its connections or the server between from and to, or
// "". The worker's own fault is named before a database fault.
func (c *checker) faultDuring(pid int, from, to time.Time) string {
	from, to = from.Add(-faultSlack), to.Add(faultSlack)
	why := ""
	for _, f := range c.faults {
		if f.Until.Before(from) || f.At.After(to) {
			continue
		}
		var w string
		switch f.Kind {
		case FaultKill, FaultKillAll, FaultUpgrade:
			if f.PID == pid {
				w = "kill"
			}
		case FaultPause:
			if f.PID == pid {
				w = "pause"
			}
		case FaultStopFast, FaultStopCrash:
			w = "postgres"
		case FaultConnKill:
			if slices.Contains(f.PIDs, pid) {
				w = "postgres"
			}
		}
		if w != "" && (why == "" || why == "postgres") {
			why = w
		}
	}
	return why
}

// loggedLost returns why a's worker logged that a's outcome did not
// (surely) get written ("lease_expiry", "write_failed"), or "".
func (c *checker) loggedLost(a execution) string {
	if why := c.logs.lostByKey[keyAttempt{a.pid, a.key, a.attempt}]; why != "" {
		return why
	}
	for _, id := range c.taskKeys[a.key] {
		if why := c.logs.lostByTask[taskAttempt{a.pid, id, a.attempt}]; why != "" {
			return why
		}
	}
	return ""
}

package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

const (
	// dueTimersSQL picks the timers due at @now, earliest first, leaving
	// out the runs in @skip (a JSON array).
	dueTimersSQL = `
SELECT run_id, seq, fire_at FROM durable_timers
WHERE fire_at <= @now AND run_id NOT IN (SELECT value FROM json_each(@skip))
ORDER BY fire_at, run_id, seq
LIMIT @limit`
	nextTimerSQL = `
SELECT fire_at FROM durable_timers
WHERE run_id NOT IN (SELECT value FROM json_each(@skip))
ORDER BY fire_at
LIMIT 1`
)

// dueTimer is a timer a fire takes.
type dueTimer struct {
	runID  string
	seq    int64
	fireAt int64
}

// FireTimers implements store.Store: it deletes up to in.Limit due timers,
// appends each one's TimerFired to its run (a run's in seq order) and makes
// each run's workflow task ready, claimed for in.ClaimAs where in.Claim and
// in.Types allow: on each queue, the first runs by run ID, of the types
// asked. The claimed tasks come with the TimerFired events the fire
// appended.
func (s *Store) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	if in.Limit <= 0 {
		return store.Fired{}, nil, nil
	}
	var (
		fired store.Fired
		tasks []store.WorkflowTask
	)
	now, until := micros(in.Now), micros(in.Now.Add(in.Lease))
	err := s.write(ctx, func(tx *sql.Tx) error {
		fired, tasks = store.Fired{}, nil
		due, err := queryAll(ctx, tx, dueTimersSQL, func(rows *sql.Rows) (t dueTimer, err error) {
			err = rows.Scan(&t.runID, &t.seq, &t.fireAt)
			return t, err
		}, sql.Named("now", now), sql.Named("skip", jsonList(in.Skip)), sql.Named("limit", in.Limit))
		if err != nil {
			return err
		}
		seqs := map[string][]int64{} // the timers fired, by run
		for _, t := range due {
			if _, err := tx.ExecContext(ctx, deleteTimerSQL, sql.Named("run_id", t.runID), sql.Named("seq", t.seq)); err != nil {
				return err
			}
			seqs[t.runID] = append(seqs[t.runID], t.seq)
		}
		fired.Count = len(due)

		runIDs := make([]string, 0, len(seqs))
		for runID := range seqs {
			runIDs = append(runIDs, runID)
		}
		slices.Sort(runIDs) // the claims go to the first runs by run ID
		picked := map[string]int{}
		heads := map[string]runHead{}
		var queues []string
		for _, runID := range runIDs {
			h, ok, err := readRun(ctx, tx, runID)
			if err != nil {
				return err
			}
			if !ok || !h.running() {
				continue // a closed run has no timers; its last are gone
			}
			heads[runID] = h
			run := seqs[runID]
			slices.Sort(run)
			types, attrs := make([]string, len(run)), make([]string, len(run))
			events := make([]history.Event, len(run))
			for i, seq := range run {
				ev := history.TimerFired{Seq: seq}
				if attrs[i], err = encodeEvent(ev); err != nil {
					return err
				}
				types[i] = ev.EventType()
				events[i] = history.Event{ID: h.nextEventID + int64(i), Attributes: ev}
			}
			_, at, err := appendEvents(ctx, tx, h, types, attrs, in.Now)
			if err != nil {
				return err
			}
			claim := in.ClaimAs != "" && slices.Contains(in.Types, h.workflowType) && picked[h.queue] < in.Claim[h.queue]
			if !claim {
				made, err := readyTask(ctx, tx, runID, h.queue, now)
				if err != nil {
					return err
				}
				if made {
					queues = append(queues, h.queue)
				}
				continue
			}
			picked[h.queue]++
			token, err := claimedTask(ctx, tx, runID, h.queue, in.ClaimAs, until)
			if err != nil {
				return err
			}
			if token == 0 {
				continue // the run has a workflow task already, which sees the events
			}
			for i := range events {
				events[i].Time = fromMicros(at)
			}
			tasks = append(tasks, store.WorkflowTask{
				RunID: runID, WorkflowID: h.workflowID, WorkflowType: h.workflowType, Queue: h.queue, Token: token,
				LockedUntil: fromMicros(until), ProcessedEventID: h.processedEventID, TraceContext: h.trace,
				ParentRunID: h.parentRunID, Events: events,
			})
		}
		for _, t := range due {
			if h, ok := heads[t.runID]; ok {
				fired.Timers = append(fired.Timers, store.FiredTimer{
					RunID: t.runID, Seq: t.seq, Lag: time.Duration(now-t.fireAt) * time.Microsecond, TraceContext: h.trace,
				})
			}
		}
		fired.Queues = distinct(queues)
		return nil
	})
	if err != nil {
		return store.Fired{}, nil, fmt.Errorf("fire timers: %w", err)
	}
	return fired, tasks, nil
}

// NextTimer implements store.Store.
func (s *Store) NextTimer(ctx context.Context, skip []string) (time.Time, bool, error) {
	var at int64
	switch err := s.reader().QueryRowContext(ctx, nextTimerSQL, sql.Named("skip", jsonList(skip))).Scan(&at); {
	case errors.Is(err, sql.ErrNoRows):
		return time.Time{}, false, nil
	case err != nil:
		return time.Time{}, false, fmt.Errorf("next timer: %w", err)
	}
	return fromMicros(at), true, nil
}

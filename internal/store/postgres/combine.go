package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/batch"
	"github.com/durable-go/durable/internal/store"
)

// Batch makes the CreateRun calls for runs without a first task (starts by
// an engine that will not run the first task itself) and the GetRun calls
// that overlap share statements, at most max each: a process that starts
// workflows and waits for their results, such as an API server, commits
// many starts at once and reads many closed runs at once. The first call
// when none is in flight goes at once and alone; see batch.Batcher. It
// works whether or not group commit runs, and never inside a caller's
// transaction. max 1 or less turns it off. Call it before the store is used.
func (s *Store) Batch(max int) {
	if max <= 1 {
		s.starts, s.reads = nil, nil
		return
	}
	// The grouper's commit sorts a batch by key, the workflow ID, so that
	// two batches wait for each other's workflow IDs in one order.
	s.starts = batch.New(max, (&grouper{s: s}).commit)
	s.reads = batch.New(max, s.getRuns)
}

// startRun runs the createRunSQL write whose arguments are args, batched
// with concurrent ones when Batch is on.
func (s *Store) startRun(ctx context.Context, workflowID string, args namedArgs, scan func(pgx.Row) error) error {
	if s.starts == nil || s.db != dbtx(s.pool) {
		return s.queryRow(ctx, createRunSQL, scan, args)
	}
	r := &groupReq{ctx: ctx, key: workflowID, sql: createRunSQL, args: args, scan: scan, many: createRunMany,
		done: make(chan error, 1)}
	s.starts.Run(r)
	return <-r.done
}

// runRead is a GetRun call waiting in a batch.
type runRead struct {
	ctx   context.Context
	runID string
	done  chan runReadResult
}

type runReadResult struct {
	run store.Run
	err error
}

const getRunsSQL = `SELECT ` + runColumns + ` WHERE r.run_id = ANY(@ids::uuid[])`

// notRunningSQL finds, among the IDs, those of no running run: a primary
// key lookup each. A plan made on an empty table would otherwise walk
// every running run, for each ID (through durable_runs_status) or once (an
// anti-join): hence LATERAL, and runOpen.
const notRunningSQL = `
SELECT i.id::text FROM unnest(@ids::uuid[]) AS i(id)
LEFT JOIN LATERAL (
    SELECT true AS running FROM durable_runs r WHERE r.run_id = i.id AND ` + runOpen + ` LIMIT 1
) r ON true
WHERE r.running IS NULL`

// NotRunning implements store.Store. A string that is not a UUID names no
// run: it is returned without asking.
func (s *Store) NotRunning(ctx context.Context, runIDs []string) ([]string, error) {
	ids, gone := parseUUIDs(runIDs)
	if len(ids) == 0 {
		return gone, nil
	}
	err := s.query(ctx, notRunningSQL, func(rows pgx.Rows) error {
		found, err := pgx.CollectRows(rows, pgx.RowTo[string])
		gone = append(gone, found...)
		return err
	}, namedArgs{"ids": ids})
	if err != nil {
		return nil, fmt.Errorf("find runs not running: %w", err)
	}
	return gone, nil
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, runID string) (store.Run, error) {
	if s.reads == nil || s.db != dbtx(s.pool) {
		return s.getRun(ctx, getRunSQL, runID)
	}
	r := &runRead{ctx: ctx, runID: runID, done: make(chan runReadResult, 1)}
	s.reads.Run(r)
	select {
	case res := <-r.done:
		return res.run, res.err
	case <-ctx.Done():
		return store.Run{}, fmt.Errorf("get run: %w", ctx.Err())
	}
}

// getRuns answers many GetRun calls with one statement. If it fails, each
// reads on its own and meets its own error (a malformed ID fails the
// statement for all).
func (s *Store) getRuns(reads []*runRead) {
	if len(reads) > 1 {
		ids := make([]string, len(reads))
		for i, r := range reads {
			ids[i] = r.runID
		}
		// The batch's read outlives any one caller's context.
		runs, err := queryIndexed(context.WithoutCancel(reads[0].ctx), s, getRunsSQL, namedArgs{"ids": uuidArray(ids)}, scanRun)
		if err == nil {
			byID := make(map[string]store.Run, len(runs))
			for _, run := range runs {
				byID[run.RunID] = run
			}
			for _, r := range reads {
				run, ok := byID[r.runID]
				if !ok {
					r.done <- runReadResult{err: store.ErrNotFound}
					continue
				}
				r.done <- runReadResult{run: run}
			}
			return
		}
		if errors.Is(err, context.Canceled) {
			for _, r := range reads {
				r.done <- runReadResult{err: fmt.Errorf("get run: %w", err)}
			}
			return
		}
	}
	for _, r := range reads {
		run, err := s.getRun(r.ctx, getRunSQL, r.runID)
		r.done <- runReadResult{run: run, err: err}
	}
}

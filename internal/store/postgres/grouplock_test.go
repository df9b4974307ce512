package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// Two group commits that share runs queue on the runs before either locks a
// row, so their row locks cannot cross (docs/performance.md, history, 2026-12-01 at 2113dce).
// Without that, the groups below deadlock: a group runs its statements kind
// by kind, so group A locks run 3 (a commit) before run 2 (a fused step),
// and group B locks run 2 (a commit) before run 3 (a fused step). An outside
// transaction holding run 2's activity task stops A between the two, and
// the test checks that B, sent then, has not locked run 2.
func TestGroupsSharingRunsDoNotCrossTheirLocks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := pgtest.Pool(t)
	sa, sb, s := postgres.New(pool), postgres.New(pool), postgres.New(pool)
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

	// Three runs in the grouper's order (run ID), each with its activity
	// claimed (events 1-2), then a signal (event 3) and its workflow task
	// claimed: each run can take a commit and a fused step.
	ids, claimed := runsWithClaimedActivity(t, s, now, 3)
	acts := map[string]store.ActivityTask{}
	wfIDs := map[string]string{}
	for i, id := range ids {
		acts[id], wfIDs[id] = claimed[i], fmt.Sprintf("wf-%d", i)
	}
	sort.Strings(ids)
	for _, id := range ids {
		_, err := s.SignalRun(ctx, store.SignalParams{WorkflowID: wfIDs[id], Now: now}, history.SignalReceived{Name: "s"})
		require.NoError(t, err)
	}
	wts, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 3, Now: now, Lease: time.Hour})
	require.NoError(t, err)
	require.Len(t, wts, 3)
	tokens := map[string]int64{}
	for _, wt := range wts {
		tokens[wt.RunID] = wt.Token
	}
	commit := func(run string) store.CommitWorkflowTaskParams { // locks the run's task, then the run
		return store.CommitWorkflowTaskParams{RunID: run, WorkflowQueue: "q", Token: tokens[run], ProcessedEventID: 3, Now: now}
	}
	fused := func(run string) store.CommitWorkflowTaskParams { // locks the run's activity task, then the run
		p := fusedStep(run, acts[run], now)
		p.ProcessedEventID = 4 // the outcome follows the signal
		return p
	}
	r1, r2, r3 := ids[0], ids[1], ids[2]

	hold, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = hold.Rollback(context.Background()) }()
	_, err = hold.Exec(ctx, `SELECT 1 FROM durable_activity_tasks WHERE id = $1 FOR UPDATE`, acts[r2].ID)
	require.NoError(t, err)

	waiting := func(n int) func() bool {
		return func() bool {
			var got int
			err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
			return err == nil && got == n
		}
	}
	a := sendGroup(t, sa, commit(r1), fused(r2), commit(r3))
	require.Eventually(t, waiting(1), 10*time.Second, time.Millisecond,
		"group A has locked runs 1 and 3 and waits for run 2's activity task")
	b := sendGroup(t, sb, commit(r2), fused(r3))
	require.Eventually(t, waiting(2), 10*time.Second, time.Millisecond, "group B waits too")

	probe, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = probe.Rollback(context.Background()) }()
	_, err = probe.Exec(ctx, `SELECT 1 FROM durable_runs WHERE run_id = $1 FOR UPDATE NOWAIT`, r2)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
		err = fmt.Errorf("group B locked run 2 while group A, which will lock it next, holds run 3 that B needs: %w", err)
	}
	require.NoError(t, err, "group B waits for group A before it locks any row")
	require.NoError(t, probe.Rollback(ctx))
	require.NoError(t, hold.Rollback(ctx))

	errsA, errsB := a(), b()
	require.Equal(t, []error{nil, nil, nil}, errsA, "group A commits whole")
	require.Equal(t, []error{nil, nil}, errsB, "then group B (A's commit of run 3 added no event, so B's step still fits)")
}

// sendGroup submits the commits to s as one held group and sends it. The
// returned function waits for the commits and returns their errors.
func sendGroup(t *testing.T, s *postgres.Store, commits ...store.CommitWorkflowTaskParams) func() []error {
	t.Helper()
	await, send := s.HoldGroupApart(t)
	errs := make([]error, len(commits))
	var wg sync.WaitGroup
	for i, c := range commits {
		wg.Go(func() { _, errs[i] = s.CommitWorkflowTask(t.Context(), c) })
	}
	await(len(commits))
	wg.Go(func() { send(len(commits)) })
	return func() []error {
		wg.Wait()
		return errs
	}
}

package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
	"github.com/durable-go/durable/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// open opens a migrated store on a fresh file of the test's, closed when
// the test ends.
func open(t *testing.T) *sqlite.Store {
	t.Helper()
	s := openAt(t, filepath.Join(t.TempDir(), "durable.db"))
	_, err := s.Migrate(t.Context())
	require.NoError(t, err)
	return s
}

// openAt opens a store on the file at path, closed when the test ends.
func openAt(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// TestStoreGroupCommit runs the suite with group commit started, as the
// engine starts it: it does nothing here, and every guarantee holds.
func TestStoreGroupCommit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t)
		t.Cleanup(s.StartGroupCommit(2, 64))
		return s
	})
}

// A fresh file has no schema until Migrate, which applies every migration
// once, however many stores migrate it at once.
func TestMigrateCreatesTheSchemaOfAFreshFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	// A name a URI must escape: the store opens this file, not another.
	path := filepath.Join(t.TempDir(), "fresh #1?.db")
	first, second := openAt(t, path), openAt(t, path)
	_, err := os.Stat(path)
	require.NoError(t, err, "Open creates the file")

	sc, err := first.SchemaVersion(ctx)
	require.NoError(t, err)
	require.Zero(t, sc.Have, "a fresh file has no schema")
	require.Equal(t, sqlite.SchemaVersion(), sc.Want)
	applied, err := first.ListAppliedMigrations(ctx)
	require.NoError(t, err)
	require.Empty(t, applied)

	var (
		mu   sync.Mutex
		all  []int
		errs []error
		wg   sync.WaitGroup
	)
	for _, s := range []*sqlite.Store{first, second, first, second} {
		wg.Go(func() {
			vs, err := s.Migrate(ctx)
			mu.Lock()
			defer mu.Unlock()
			all, errs = append(all, vs...), append(errs, err)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	slices.Sort(all)
	var versions []int
	for _, m := range sqlite.Migrations() {
		versions = append(versions, m.Version)
	}
	require.Equal(t, versions, all, "each migration is applied once, by one of the callers")

	for _, s := range []*sqlite.Store{first, second} {
		sc, err := s.SchemaVersion(ctx)
		require.NoError(t, err)
		require.Equal(t, sc.Want, sc.Have)
		applied, err := s.ListAppliedMigrations(ctx)
		require.NoError(t, err)
		require.Len(t, applied, len(versions))
	}
	run := createRun(t, second, "order-1", "wf", false)
	got, err := first.GetRun(ctx, run.RunID)
	require.NoError(t, err, "the schema holds runs")
	require.Equal(t, run.RunID, got.RunID)
}

// A store opened again on its file finds what the first one wrote, and
// carries on from it: claim tokens are not handed out twice.
func TestReopenedFileKeepsItsRuns(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "durable.db")
	now := time.Date(2030, time.January, 2, 3, 4, 5, 6000, time.UTC)

	s, err := sqlite.Open(ctx, path)
	require.NoError(t, err)
	_, err = s.Migrate(ctx)
	require.NoError(t, err)
	run := createRun(t, s, "order-1", "wf", false)
	tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "wf", WorkerID: "w", Limit: 1, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	before, err := s.GetRun(ctx, run.RunID)
	require.NoError(t, err)
	events, err := s.ListEvents(ctx, run.RunID, 0)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "closing twice")
	_, err = s.GetRun(ctx, run.RunID)
	require.Error(t, err, "a closed store reads nothing")

	again := openAt(t, path)
	applied, err := again.Migrate(ctx)
	require.NoError(t, err)
	require.Empty(t, applied, "the file keeps its schema")
	after, err := again.GetRun(ctx, run.RunID)
	require.NoError(t, err)
	require.Equal(t, before, after)
	reread, err := again.ListEvents(ctx, run.RunID, 0)
	require.NoError(t, err)
	require.Equal(t, events, reread)

	later := now.Add(2 * time.Minute) // the first claim's lease has run out
	next, err := again.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "wf", WorkerID: "w", Limit: 1, Now: later, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, next, 1, "the task outlived its store")
	require.Greater(t, next[0].Token, tasks[0].Token, "tokens go on from where they were")
	_, err = again.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: tasks[0].Token, ProcessedEventID: 1, Now: later,
	})
	require.ErrorIs(t, err, store.ErrLeaseLost, "the claim of before the reopen is fenced")
}

// Notes reach every store open on the same file in this process, whatever
// path it was opened by, and no store on another file.
func TestStoresOnOneFileShareTheirNotes(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	dir := t.TempDir()
	sender := openAt(t, filepath.Join(dir, "durable.db"))
	_, err := sender.Migrate(ctx)
	require.NoError(t, err)
	link := filepath.Join(t.TempDir(), "link")
	require.NoError(t, os.Symlink(dir, link))
	receiver := openAt(t, filepath.Join(link, "durable.db"))
	elsewhere := open(t)

	got, gotElsewhere := listen(t, receiver), listen(t, elsewhere)
	closed := store.Note{Kind: store.NoteClosed, RunID: uuid.NewString(), Close: &store.CloseRun{
		Status: store.StatusCompleted, Result: json.RawMessage(`"done"`),
	}}
	require.NoError(t, sender.Notify(ctx, []store.Note{closed}))
	createRun(t, sender, "order-1", "started", true) // announces its task itself
	require.Equal(t, closed, receive(t, got))
	require.Equal(t, store.Note{Kind: store.NoteWorkflowTasks, Queue: "started"}, receive(t, got))

	// Notes come in order: if the other file's listener had one of the
	// sender's, it would come before this one.
	own := store.Note{Kind: store.NoteTimers}
	require.NoError(t, elsewhere.Notify(ctx, []store.Note{own}))
	require.Equal(t, own, receive(t, gotElsewhere), "a store on another file hears nothing of this one")
}

// noteWait bounds the wait for a note that must come: a failure, not a
// hang, if it does not.
const noteWait = 30 * time.Second

// receive returns the next note of notes.
func receive(t *testing.T, notes <-chan store.Note) store.Note {
	t.Helper()
	select {
	case n := <-notes:
		return n
	case <-time.After(noteWait):
		require.FailNow(t, "no note came", "waited %v", noteWait)
		return store.Note{}
	}
}

// listen starts a Listen on s until the test ends, and returns the notes
// it delivers. It returns once Listen listens.
func listen(t *testing.T, s *sqlite.Store) <-chan store.Note {
	t.Helper()
	ctx, cancel := context.WithCancel(t.Context())
	notes, listening, done := make(chan store.Note, 100), make(chan struct{}), make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { close(listening) }, func(n store.Note) { notes <- n }) }()
	t.Cleanup(func() {
		cancel()
		require.ErrorIs(t, <-done, context.Canceled, "Listen returns its context's error")
	})
	select {
	case <-listening:
	case err := <-done:
		done <- err // for the cleanup
		require.FailNow(t, "Listen returned before it listened", "%v", err)
	case <-time.After(noteWait):
		require.FailNow(t, "Listen did not start listening", "waited %v", noteWait)
	}
	return notes
}

// Close ends the store's Listen calls, and a closed store listens no more.
func TestCloseEndsListen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "durable.db"))
	require.NoError(t, err)
	listening, done := make(chan struct{}), make(chan error, 1)
	go func() { done <- s.Listen(ctx, func() { close(listening) }, func(store.Note) {}) }()
	select {
	case <-listening:
	case err := <-done:
		require.FailNow(t, "Listen returned before it listened", "%v", err)
	}
	require.NoError(t, s.Close())
	select {
	case err = <-done:
	case <-time.After(noteWait):
		require.FailNow(t, "Listen did not return once its store closed", "waited %v", noteWait)
	}
	require.Error(t, err)
	require.NotErrorIs(t, err, context.Canceled, "the store closed, not the context")
	require.Error(t, s.Listen(ctx, func() { t.Error("a closed store listened") }, func(store.Note) {}))
	require.Error(t, s.Notify(ctx, []store.Note{{Kind: store.NoteTimers}}))
}

// Stores on one file write one at a time: their claims never share a task.
func TestStoresOnOneFileShareItsWriteLock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "durable.db")
	stores := []*sqlite.Store{openAt(t, path), openAt(t, path)}
	_, err := stores[0].Migrate(ctx)
	require.NoError(t, err)
	const n = 60
	for i := range n {
		createRun(t, stores[i%2], fmt.Sprintf("order-%d", i), "wf", false)
	}
	now := time.Now()
	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		errs    []error
		wg      sync.WaitGroup
	)
	for w := range 6 {
		wg.Go(func() {
			s := stores[w%2]
			for {
				tasks, err := s.ClaimWorkflowTasks(ctx, store.ClaimParams{
					Queue: "wf", WorkerID: fmt.Sprintf("w%d", w), Limit: 2, Now: now, Lease: time.Hour,
				})
				mu.Lock()
				for _, task := range tasks {
					claimed[task.RunID]++
				}
				errs = append(errs, err)
				mu.Unlock()
				if err != nil || len(tasks) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Len(t, claimed, n, "every task was claimed")
	for runID, times := range claimed {
		require.Equal(t, 1, times, "claims of the task of run %s", runID)
	}
}

// Transient says yes to SQLite's "the file is locked" and no to its
// answers, on errors of the driver itself.
func TestTransientOnDriverErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "durable.db")
	s := openAt(t, path)
	_, err := s.Migrate(ctx)
	require.NoError(t, err)

	raw := func() *sql.Conn {
		t.Helper()
		db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, db.Close()) })
		conn, err := db.Conn(ctx)
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, conn.Close()) })
		return conn
	}
	holder, waiter := raw(), raw()
	_, err = holder.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.NoError(t, err)
	_, busy := waiter.ExecContext(ctx, "BEGIN IMMEDIATE")
	require.Error(t, busy, "the write lock is held")
	require.True(t, s.Transient(fmt.Errorf("claim: %w", busy)), "%v", busy)
	_, err = holder.ExecContext(ctx, "ROLLBACK")
	require.NoError(t, err)

	_, conflict := waiter.ExecContext(ctx, "INSERT INTO durable_schema_migrations (version, name, applied_at) VALUES (1, 'again', 0)")
	require.Error(t, conflict, "the version is recorded")
	require.False(t, s.Transient(conflict), "%v", conflict)
}

// Times are kept to the microsecond, and a timer's fire time is rounded
// up, so that it never fires early.
func TestTimersKeepMicrosecondsAndNeverFireEarly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t)
	now := time.Date(2030, time.January, 2, 3, 4, 5, 6000, time.UTC)
	run, err := s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "sleeper", WorkflowType: "Order", Queue: "wf",
		Input: json.RawMessage(`1`), Now: now.Add(999 * time.Nanosecond), ClaimAs: "w", Lease: time.Minute,
	})
	require.NoError(t, err)
	require.Equal(t, now, run.CreatedAt, "the nanoseconds are dropped")
	fireAt := now.Add(time.Second + 500*time.Nanosecond)
	_, err = s.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
		RunID: run.RunID, Token: run.Token, ProcessedEventID: 1, Now: now,
		Events: []history.Attributes{history.TimerStarted{Seq: 1, FireAt: fireAt}},
		Timers: []store.NewTimer{{Seq: 1, FireAt: fireAt}},
	})
	require.NoError(t, err)
	timers, err := s.ListPendingTimers(ctx, run.RunID)
	require.NoError(t, err)
	require.Len(t, timers, 1)
	require.Equal(t, now.Add(time.Second+time.Microsecond), timers[0].FireAt, "rounded up")

	fired, _, err := s.FireTimers(ctx, store.FireTimersParams{Now: now.Add(time.Second), Limit: 10})
	require.NoError(t, err)
	require.Zero(t, fired.Count, "half a microsecond early")
	fired, _, err = s.FireTimers(ctx, store.FireTimersParams{Now: now.Add(time.Second + time.Microsecond), Limit: 10})
	require.NoError(t, err)
	require.Equal(t, 1, fired.Count)
}

// The store refuses what the Postgres store cannot hold, though SQLite
// could, and writes nothing of it: a run ID that is not a UUID, a name
// with a NUL byte or bytes that are not UTF-8, a payload with a NUL
// character.
func TestRefusesWhatPostgresCannotHold(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := open(t)
	for name, in := range map[string]store.CreateRunParams{
		"RunIDNotAUUID":    {RunID: "run-1", WorkflowID: "order-1", WorkflowType: "Order", Queue: "wf"},
		"NULInWorkflowID":  {RunID: uuid.NewString(), WorkflowID: "order-\x00", WorkflowType: "Order", Queue: "wf"},
		"NotUTF8InQueue":   {RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: "wf\xff"},
		"NULInTheInput":    {RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: "wf", Input: json.RawMessage(`"\u0000"`)},
		"NotUTF8InTheType": {RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order\xff", Queue: "wf"},
	} {
		in.Now = time.Now()
		_, err := s.CreateRun(ctx, in)
		require.ErrorIs(t, err, store.ErrUnstorable, name)
		require.False(t, s.Transient(err), name)
	}
	runs, err := s.ListRuns(ctx, store.ListRunsParams{})
	require.NoError(t, err)
	require.Empty(t, runs, "nothing was written")
}

// createRun starts a run of workflow "Order" on queue, announcing its task
// if notify is set.
func createRun(t *testing.T, s *sqlite.Store, workflowID, queue string, notify bool) store.Run {
	t.Helper()
	run, err := s.CreateRun(t.Context(), store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "Order", Queue: queue,
		Input: json.RawMessage(`{"order":1}`), Now: time.Now(), Notify: notify,
	})
	require.NoError(t, err)
	return run
}

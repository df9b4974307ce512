package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/store"
)

// The cases of this file cover the store's database itself: its schema,
// its clock and its errors.

// A fresh store's schema is current: it has every migration this build
// needs, listed in order, and migrating it again, even from several
// callers at once, applies nothing.
func testMigrateOnACurrentSchemaAppliesNothing(t *testing.T, b *bundle) {
	sc, err := b.s.SchemaVersion(b.ctx)
	require.NoError(t, err)
	want := sc.Want
	require.Positive(t, want, "this build needs a schema")
	require.Equal(t, want, sc.Have, "a fresh store is migrated")
	ms := b.s.Migrations()
	require.Equal(t, want, ms[len(ms)-1].Version, "the build needs its last migration")
	require.LessOrEqual(t, sc.Oldest, want, "this build runs on its own schema")
	oldest := 0
	for _, m := range ms {
		oldest = max(oldest, m.OldestEngine)
	}
	require.Equal(t, oldest, sc.Oldest, "the oldest engine is the highest any migration needs")

	applied, err := b.s.ListAppliedMigrations(b.ctx)
	require.NoError(t, err)
	require.NotEmpty(t, applied)
	for i, m := range applied {
		require.NotEmpty(t, m.Name, "migration %d", m.Version)
		require.False(t, m.AppliedAt.IsZero(), "migration %d", m.Version)
		if i > 0 {
			require.Greater(t, m.Version, applied[i-1].Version, "in version order")
		}
	}
	require.Equal(t, want, applied[len(applied)-1].Version, "the last one applied is the version needed")

	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		more []int
	)
	for range 3 {
		wg.Go(func() {
			vs, err := b.s.Migrate(b.ctx)
			mu.Lock()
			defer mu.Unlock()
			errs, more = append(errs, err), append(more, vs...)
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	require.Empty(t, more, "a current schema needs nothing")

	again, err := b.s.ListAppliedMigrations(b.ctx)
	require.NoError(t, err)
	require.Equal(t, applied, again)
	sc2, err := b.s.SchemaVersion(b.ctx)
	require.NoError(t, err)
	require.Equal(t, sc, sc2)
}

// Engines record themselves and forget themselves: a second record keeps
// the first's start and moves its last sighting on, by the store's clock.
func testEnginesRecordThemselves(t *testing.T, b *bundle) {
	id := "storetest:" + uuid.NewString()
	rec := store.EngineRecord{WorkerID: id, SchemaVersion: 7, Build: "v0.1.0", Host: "h1", PID: 42}
	before, err := b.s.Now(b.ctx)
	require.NoError(t, err)
	require.NoError(t, b.s.RecordEngine(b.ctx, rec))

	find := func() (store.EngineRecord, bool) {
		es, err := b.s.ListEngines(b.ctx)
		require.NoError(t, err)
		for _, e := range es {
			if e.WorkerID == id {
				return e, true
			}
		}
		return store.EngineRecord{}, false
	}
	got, ok := find()
	require.True(t, ok, "the engine is listed")
	require.Equal(t, 7, got.SchemaVersion)
	require.Equal(t, "v0.1.0", got.Build)
	require.Equal(t, "h1", got.Host)
	require.Equal(t, 42, got.PID)
	require.False(t, got.StartedAt.Before(before.Truncate(time.Microsecond)), "started by the store's clock")
	require.Equal(t, got.StartedAt, got.SeenAt)

	// Postgres's now() is the transaction's start: make sure the second
	// record's is later.
	require.Eventually(t, func() bool {
		now, err := b.s.Now(b.ctx)
		return err == nil && now.After(got.SeenAt)
	}, time.Second, time.Millisecond)
	rec.SchemaVersion, rec.Build = 8, "v0.2.0"
	require.NoError(t, b.s.RecordEngine(b.ctx, rec))
	again, ok := find()
	require.True(t, ok)
	require.Equal(t, 8, again.SchemaVersion, "a record says what the engine is now")
	require.Equal(t, "v0.2.0", again.Build)
	require.Equal(t, got.StartedAt, again.StartedAt, "the start stays the first record's")
	require.True(t, again.SeenAt.After(got.SeenAt), "seen again later")

	require.NoError(t, b.s.ForgetEngine(b.ctx, id))
	_, ok = find()
	require.False(t, ok, "forgotten")
	require.NoError(t, b.s.ForgetEngine(b.ctx, id), "forgetting an unknown engine is no error")
}

// Now reads the clock every engine shares: the database's, close to this
// machine's.
func testNowReadsTheDatabaseClock(t *testing.T, b *bundle) {
	now, err := b.s.Now(b.ctx)
	require.NoError(t, err)
	require.WithinDuration(t, time.Now(), now, time.Minute, "the database's clock")
}

// Transient says no to the store's answers (an error that says something
// about the run or task) and to a canceled call: only the database being
// unreachable or busy is worth a retry.
func testTransientIsFalseForAnswers(t *testing.T, b *bundle) {
	_, notFound := b.s.GetRun(b.ctx, uuid.NewString())
	require.ErrorIs(t, notFound, store.ErrNotFound)
	b.createRun(t, "order-1", wfQueue)
	_, conflict := b.s.CreateRun(b.ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "order-1", WorkflowType: "Order", Queue: wfQueue, Now: b.now,
	})
	require.ErrorIs(t, conflict, store.ErrConflict)
	canceledCtx, cancel := context.WithCancel(b.ctx)
	cancel()
	_, canceled := b.s.GetRun(canceledCtx, uuid.NewString())
	require.Error(t, canceled, "a call with a canceled context")

	for _, err := range []error{
		nil,
		store.ErrNotFound, store.ErrConflict, store.ErrLeaseLost, store.ErrRunClosed, store.ErrRunMoved, store.ErrActivityCanceled,
		fmt.Errorf("get run: %w", store.ErrNotFound),
		notFound, conflict,
		context.Canceled, fmt.Errorf("get run: %w", context.Canceled),
	} {
		require.False(t, b.s.Transient(err), "%v", err)
	}
	require.False(t, b.s.Transient(canceled), "the store's own error for a canceled call: %v", canceled)
}

// futureStore is a store whose build has one migration more than the
// database: a release that needs engines of its own version.
type futureStore struct {
	store.Store
	next store.Migration
}

func (f futureStore) Migrations() []store.Migration { return append(f.Store.Migrations(), f.next) }

// PlanMigration names the running engines a pending migration would leave
// unable to run, and only those: an engine built for the migration's
// oldest engine version or later is not in the way, nor is one that has
// forgotten itself.
func testPlanMigrationNamesTheEnginesItWouldBreak(t *testing.T, b *bundle) {
	sc, err := b.s.SchemaVersion(b.ctx)
	require.NoError(t, err)
	next := store.Migration{Version: sc.Want + 1, Name: fmt.Sprintf("%04d_contract", sc.Want+1), OldestEngine: sc.Want + 1}
	future := futureStore{Store: b.s, next: next}

	old := store.EngineRecord{WorkerID: "storetest-old:" + uuid.NewString(), SchemaVersion: sc.Want, Build: "v0.1.0", Host: "h", PID: 1}
	current := store.EngineRecord{WorkerID: "storetest-new:" + uuid.NewString(), SchemaVersion: sc.Want + 1, Build: "v0.2.0", Host: "h", PID: 2}
	require.NoError(t, b.s.RecordEngine(b.ctx, old))
	require.NoError(t, b.s.RecordEngine(b.ctx, current))

	plan, err := store.PlanMigration(b.ctx, future)
	require.NoError(t, err)
	require.Equal(t, []store.Migration{next}, plan.Pending)
	require.Equal(t, sc.Want+1, plan.Needs)
	ids := func(es []store.EngineRecord) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.WorkerID)
		}
		return out
	}
	require.Subset(t, ids(plan.Live), []string{old.WorkerID, current.WorkerID})
	require.Contains(t, ids(plan.Blocked), old.WorkerID)
	require.NotContains(t, ids(plan.Blocked), current.WorkerID, "built for the new version")
	require.ErrorContains(t, plan.Err(), next.Name)
	require.ErrorContains(t, plan.Err(), old.WorkerID, "the error names the engine in the way")

	plan, err = store.PlanMigration(b.ctx, b.s)
	require.NoError(t, err)
	require.Empty(t, plan.Pending, "the store's own build has nothing to apply")
	require.NoError(t, plan.Err())

	require.NoError(t, b.s.ForgetEngine(b.ctx, old.WorkerID))
	plan, err = store.PlanMigration(b.ctx, future)
	require.NoError(t, err)
	require.NotContains(t, ids(plan.Blocked), old.WorkerID, "an engine that stopped is not in the way")
}

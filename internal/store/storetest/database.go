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
	have, want, err := b.s.SchemaVersion(b.ctx)
	require.NoError(t, err)
	require.Positive(t, want, "this build needs a schema")
	require.Equal(t, want, have, "a fresh store is migrated")

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
	have, want2, err := b.s.SchemaVersion(b.ctx)
	require.NoError(t, err)
	require.Equal(t, want, want2)
	require.Equal(t, want, have)
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

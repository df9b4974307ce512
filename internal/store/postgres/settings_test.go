package postgres_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// A workflow-task claim's transaction commits without waiting for the
// disk, and only it: the claim sends those settings first in its batch, and
// they are the transaction's, not the session's.
func TestClaimSettingsHoldForTheirTransactionOnly(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(pgtest.Database(t))
	require.NoError(t, err)
	cfg.MaxConns = 1 // every statement below on the same session
	batches := &batchLog{}
	cfg.ConnConfig.Tracer = batches
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	s := postgres.New(pool)

	_, err = s.ClaimWorkflowTasks(t.Context(), store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: time.Now(), Lease: time.Minute})
	require.NoError(t, err)
	_, err = s.ClaimActivityTasks(t.Context(), store.ClaimParams{Queue: "q", WorkerID: "w", Limit: 1, Now: time.Now()})
	require.NoError(t, err)
	require.Equal(t, []string{postgres.ClaimSettings, postgres.IndexPlans}, batches.firsts(),
		"the workflow-task claim does not wait for the disk; the activity claim does")

	setting := func(settings string) (commit, sorts string) {
		err := s.RunAllWith(t.Context(), settings, func(b *pgx.Batch) {
			b.Queue(`SELECT current_setting('synchronous_commit'), current_setting('enable_sort')`).QueryRow(func(r pgx.Row) error {
				return r.Scan(&commit, &sorts)
			})
		})
		require.NoError(t, err)
		return commit, sorts
	}
	commit, sorts := setting(postgres.ClaimSettings)
	require.Equal(t, "off", commit, "the claim's commit does not wait for the disk")
	require.Equal(t, "off", sorts, "and its planner is held to indexes, as every engine statement's")
	commit, sorts = setting(postgres.IndexPlans)
	require.Equal(t, "on", commit, "the next transaction on the session waits again")
	require.Equal(t, "off", sorts)
	var session string
	require.NoError(t, pool.QueryRow(t.Context(), `SELECT current_setting('enable_sort')`).Scan(&session))
	require.Equal(t, "on", session, "nothing stays set on the session")
}

// Every transaction the store writes in waits for the disk at its commit,
// where the session says it need not (as a database's default may): its
// own, and a caller's that StartTx, SignalTx or EnqueueTx writes in. A
// stronger setting is left as it is, and so are a caller's planner
// settings.
func TestCommitsWaitForTheDiskWhereTheSessionSaysNot(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ session, want string }{
		{"off", "local"},
		{"on", "on"},
		{"remote_apply", "remote_apply"},
	} {
		t.Run(tt.session, func(t *testing.T) {
			t.Parallel()
			cfg, err := pgxpool.ParseConfig(pgtest.Database(t))
			require.NoError(t, err)
			cfg.ConnConfig.RuntimeParams["synchronous_commit"] = tt.session
			pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			s := postgres.New(pool)

			read := func(s *postgres.Store, settings string) (commit, sorts string) {
				t.Helper()
				require.NoError(t, s.RunAllWith(t.Context(), settings, func(b *pgx.Batch) {
					b.Queue(`SELECT current_setting('synchronous_commit'), current_setting('enable_sort')`).QueryRow(func(r pgx.Row) error {
						return r.Scan(&commit, &sorts)
					})
				}))
				return commit, sorts
			}
			commit, _ := read(s, postgres.IndexPlans)
			require.Equal(t, tt.want, commit, "the store's own transactions")
			commit, _ = read(s, postgres.ClaimSettings)
			require.Equal(t, "off", commit, "a workflow-task claim still does not wait")

			tx, err := pool.Begin(t.Context())
			require.NoError(t, err)
			defer tx.Rollback(t.Context()) //nolint:errcheck // the test reads, then rolls back
			commit, sorts := read(s.WithTx(tx), postgres.IndexPlans)
			require.Equal(t, tt.want, commit, "a caller's transaction")
			require.Equal(t, "on", sorts, "whose planner settings stay the caller's")
		})
	}
}

// batchLog records the first statement of each batch sent.
type batchLog struct {
	mu    sync.Mutex
	first []string
	fresh bool // the next query traced is a batch's first
}

func (l *batchLog) firsts() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first
}

func (l *batchLog) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	l.mu.Lock()
	l.fresh = true
	l.mu.Unlock()
	return ctx
}

func (l *batchLog) TraceBatchQuery(_ context.Context, _ *pgx.Conn, d pgx.TraceBatchQueryData) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.fresh {
		l.first, l.fresh = append(l.first, d.SQL), false
	}
}

func (l *batchLog) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

func (l *batchLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}

func (l *batchLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

package engine

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

// storage is everything the engine asks of its database: the store seam,
// plus timers, group commit and the reads behind Describe, stats and the
// replay gate. The engine holds it as an interface so that wrappers (the
// payload codec, and the fault injector of the tests) sit between the
// engine and Postgres.
type storage interface {
	store.Store

	// WithTx returns the same storage running its statements in tx.
	WithTx(tx pgx.Tx) storage
	// FireTimersClaiming fires due timers, up to in.Limit, and claims the
	// workflow tasks it makes as in.ClaimAs asks (the scanner's store is
	// timerFirer, which calls these two).
	FireTimersClaiming(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error)
	// NextTimerSkipping returns the earliest fire time of any timer of a
	// run not in skip, or ok false.
	NextTimerSkipping(ctx context.Context, skip []string) (at time.Time, ok bool, err error)
	// ListEventsOfRuns returns the whole histories of runs, by run ID.
	ListEventsOfRuns(ctx context.Context, runIDs []string) (map[string][]history.Event, error)
	// StartGroupCommit commits concurrent step writes together until stop.
	StartGroupCommit(flushers, max int) (stop func())

	ListRuns(ctx context.Context, in store.ListRunsParams) ([]store.RunSummary, error)
	ListPendingActivities(ctx context.Context, runID string) ([]store.PendingActivity, error)
	ListPendingTimers(ctx context.Context, runID string) ([]store.PendingTimer, error)
	QueueStats(ctx context.Context, now time.Time) ([]store.QueueStats, error)
	DeadLetterStats(ctx context.Context) ([]store.DeadLetterStats, error)
}

// pgStorage is the Postgres store as the engine's storage.
type pgStorage struct{ *postgres.Store }

func (s pgStorage) WithTx(tx pgx.Tx) storage { return pgStorage{s.Store.WithTx(tx)} }

var _ storage = pgStorage{}

// newStore is the Postgres store as opts configure it: overlapping starts
// share commits, and overlapping reads of runs statements, up to
// CommitGroupSize, as steps do while the engine runs.
func newStore(pool *pgxpool.Pool, opts Options) *postgres.Store {
	s := postgres.New(pool)
	s.Batch(opts.CommitGroupSize)
	return s
}

package timer

import (
	"context"
	"log/slog"
	"time"

	"github.com/durable-go/durable/internal/store"
)

// Store is what the scanner needs from the database.
type Store interface {
	// FireTimers fires up to limit timers due at now, each with its run's
	// TimerFired event and ready workflow task, and reports them.
	FireTimers(ctx context.Context, now time.Time, limit int) (store.Fired, error)
	// NextTimer returns the earliest fire time of any timer, or ok false.
	NextTimer(ctx context.Context) (at time.Time, ok bool, err error)
}

// Options configure a Scanner.
type Options struct {
	// NowFunc is the clock timers are due by. Default time.Now. The engine
	// passes its own: the database's clock, or a test's.
	NowFunc func() time.Time
	// BatchSize is how many timers one transaction fires. Default 500.
	BatchSize int
	// PollInterval is the longest the scanner sleeps without looking, in
	// case a wake-up was missed. Default 5s.
	PollInterval time.Duration
	// OnFire is called after each batch that fired timers.
	OnFire func(store.Fired)
	// Logger receives errors. Default slog.Default().
	Logger *slog.Logger
	// ErrorFunc, if set, is told of each failure to fire timers (with the
	// wait before the next try) and, with a nil error, of the first success
	// after failures; the scanner then logs nothing itself. Default: log the
	// first failure of an outage at Warn, the retries at Debug and the
	// recovery at Info.
	ErrorFunc func(err error, retryIn time.Duration)
}

// Scanner fires due timers.
type Scanner struct {
	store Store
	opts  Options
	wake  chan struct{}
}

// NewScanner returns a scanner on s.
func NewScanner(s Store, o Options) *Scanner {
	if o.NowFunc == nil {
		o.NowFunc = time.Now
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 500
	}
	if o.PollInterval <= 0 {
		o.PollInterval = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Scanner{store: s, opts: o, wake: make(chan struct{}, 1)}
}

// Wake makes the scanner look again now: a timer may have been created that
// is due before the one it sleeps for, or the clock may have moved.
func (s *Scanner) Wake() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Run fires timers until ctx is done.
func (s *Scanner) Run(ctx context.Context) {
	backoff := 100 * time.Millisecond
	report := s.opts.ErrorFunc
	if report == nil {
		report = s.logOutage(ctx)
	}
	failing := false
	for ctx.Err() == nil {
		fired, err := s.store.FireTimers(ctx, s.opts.NowFunc(), s.opts.BatchSize)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failing = true
			report(err, backoff)
			if !s.sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		if failing {
			failing = false
			report(nil, 0)
		}
		backoff = 100 * time.Millisecond
		if fired.Count > 0 && s.opts.OnFire != nil {
			s.opts.OnFire(fired)
		}
		if fired.Count == s.opts.BatchSize {
			continue // more may be due
		}
		wait := s.opts.PollInterval
		if at, ok, err := s.store.NextTimer(ctx); err == nil && ok {
			wait = min(wait, max(at.Sub(s.opts.NowFunc()), 0))
		}
		if wait > 0 && !s.sleep(ctx, wait) {
			return
		}
	}
}

// logOutage returns the default ErrorFunc: one Warn line per outage, the
// retries at Debug, one Info line at the end.
func (s *Scanner) logOutage(ctx context.Context) func(error, time.Duration) {
	var (
		since    time.Time
		failures int
	)
	return func(err error, retryIn time.Duration) {
		log := s.opts.Logger
		switch {
		case err == nil:
			log.LogAttrs(ctx, slog.LevelInfo, "fire timers: the database answers again",
				slog.Duration("outage", time.Since(since)), slog.Int("failures", failures))
			failures = 0
		case failures == 0:
			since, failures = time.Now(), 1
			log.LogAttrs(ctx, slog.LevelWarn, "fire timers failed; retrying with backoff until the database answers (retries are logged at Debug)",
				slog.String("error", err.Error()), slog.Duration("retry_in", retryIn))
		default:
			failures++
			log.LogAttrs(ctx, slog.LevelDebug, "fire timers failed again", slog.String("error", err.Error()), slog.Duration("retry_in", retryIn))
		}
	}
}

// sleep waits for d, a wake-up or the end of ctx; it reports whether ctx is
// still alive.
func (s *Scanner) sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-s.wake:
	case <-t.C:
	}
	return true
}

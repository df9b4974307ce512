// Package outage logs the database outages that an engine's background
// loops see, once per outage rather than once per retry.
package outage

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Log logs database outages as the engine's background loops see
// them: once, at Warn, when the first loop fails; at Debug for each retry of
// any loop after that; and once, at Info, when one works again. Without it
// every loop (the pollers of each queue, the timer scanner, the
// notification listener and sender) would log every retry of every outage.
// A killed connection is an outage that lasts one retry.
type Log struct {
	log  *slog.Logger
	down atomic.Bool // fast path for ok

	mu       sync.Mutex
	since    time.Time
	failures int
}

// Fail records that what failed with err and is retried in retryIn.
func (d *Log) Fail(ctx context.Context, what string, err error, retryIn time.Duration) {
	d.mu.Lock()
	first := !d.down.Load()
	if first {
		d.down.Store(true)
		d.since, d.failures = time.Now(), 0
	}
	d.failures++
	d.mu.Unlock()
	attrs := []slog.Attr{slog.String("op", what), slog.String("error", err.Error()), slog.Duration("retry_in", retryIn)}
	if first {
		d.log.LogAttrs(ctx, slog.LevelWarn, "database unreachable; background work retries with backoff until it answers (retries are logged at Debug)", attrs...)
		return
	}
	d.log.LogAttrs(ctx, slog.LevelDebug, "database still unreachable", attrs...)
}

// OK records that what worked: if the database was down, the outage is over.
func (d *Log) OK(ctx context.Context, what string) {
	if !d.down.Load() {
		return
	}
	d.mu.Lock()
	if !d.down.Load() {
		d.mu.Unlock()
		return
	}
	d.down.Store(false)
	since, n := d.since, d.failures
	d.mu.Unlock()
	d.log.LogAttrs(ctx, slog.LevelInfo, "database reachable again", slog.String("op", what),
		slog.Duration("outage", time.Since(since)), slog.Int("failures", n))
}

// New returns a Log that writes to log.
func New(log *slog.Logger) *Log { return &Log{log: log} }

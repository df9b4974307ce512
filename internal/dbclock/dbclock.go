// Package dbclock is the engine's clock: the database's, read now and then
// and carried forward by the process's monotonic clock.
package dbclock

import (
	"context"
	"log/slog"
	"sync/atomic"
	"time"
)

// The engine's clock decides every lease, claim, due time and timer fire,
// and every engine on a database compares its times with the others'. So,
// unless Options.NowFunc is set (a test's clock), it is the database's: a
// Clock reads the database's clock now and then and carries it forward
// by the process's monotonic clock, which a wrong or stepped wall clock
// does not move. A read costs a round trip every ten seconds; the clock itself
// costs a time.Now and an atomic load.

// clockResync is how old the database's reading may grow before the
// clock reads it again. Now and Due each allow for the drift since the
// reading (clockDrift): a timer is due at Now plus its duration and fires
// once Due reaches it, so it fires up to twice the drift late, which at a
// minute was up to 12 ms (W3's lateness p50 rose 0.8 ms, docs/performance.md,
// history, 2026-12-03). Ten seconds bounds it to 2 ms, for one round trip
// every ten seconds per engine.
const clockResync = 10 * time.Second

// clockPrecise is the uncertainty of a reading (half its round trip) the
// clock is content with. A reading less precise (the process paused or
// starved during the read, the database restarting, a first read that
// opened its connection) is read again after clockRetry, and New reads up
// to clockFirstReads times for a first one. A timer fires up to twice the
// uncertainty late (Now at its latest, Due at its earliest): at 5 ms, a
// first read that paid for its connection kept W3's timers about 1 ms
// later than before the clock was the database's.
const (
	clockPrecise    = time.Millisecond
	clockRetry      = time.Second
	clockFirstReads = 5
)

// clockDrift bounds how fast two clocks that tick at their own rates drift
// apart: 100 parts per million, an uncorrected quartz clock's worst.
const clockDrift = 10_000

// Clock is the database's clock carried forward by the process's.
type Clock struct {
	read  func(context.Context) (time.Time, error) // the database's clock
	local func() time.Time                         // the process's: time.Now
	log   *slog.Logger

	base    atomic.Pointer[clockReading]
	latest  atomic.Int64 // the latest time now returned, in Unix nanoseconds
	syncing atomic.Bool  // a read is under way
	failing atomic.Bool  // the last read failed: warned
}

// clockReading pairs the database's clock with the process's.
type clockReading struct {
	db    time.Time // the database's clock at local
	local time.Time // the process's clock, with its monotonic reading
	// off bounds how far db may be off: half the read's round trip.
	off time.Duration
	// tried is when the process last tried to read the database's clock.
	tried time.Time
}

// New returns the database's clock as read now; it fails if the
// database does not answer.
func New(ctx context.Context, read func(context.Context) (time.Time, error), local func() time.Time, log *slog.Logger) (*Clock, error) {
	c := &Clock{read: read, local: local, log: log}
	for range clockFirstReads {
		if err := c.sync(ctx); err != nil {
			return nil, err
		}
		if c.base.Load().off <= clockPrecise {
			break
		}
	}
	return c, nil
}

// Now returns the database's clock at its latest: the reading carried
// forward plus how far it may be off (half its round trip, and the drift
// since), so that a timer due at now plus its duration, or a lease ending
// at now plus its length, is never cut short by the database's clock. Once
// ten seconds (every clockRetry while the reading is imprecise) it is read
// again in the background; the clock goes on meanwhile. It never goes
// back: a new reading a little behind the last one carried forward holds
// the clock still until it catches up.
func (c *Clock) Now() time.Time {
	b, since := c.reading()
	t := b.db.Add(since + b.off + since.Abs()/clockDrift) // at its latest
	for n := t.UnixNano(); ; {
		latest := c.latest.Load()
		if n <= latest {
			return time.Unix(0, latest).In(t.Location())
		}
		if c.latest.CompareAndSwap(latest, n) {
			return t
		}
	}
}

// Due returns the database's clock at its earliest: the reading carried
// forward less how far it may be off (half its round trip, and the drift
// since). Whether a timer is due, or a claim has lapsed, is decided by it,
// so that no engine fires a timer or takes a claim before the database's
// clock says so.
//
// It is the reading's own, not now's less the uncertainty: now may hold
// still at what an earlier, less precise reading allowed.
func (c *Clock) Due() time.Time {
	b, since := c.reading()
	return b.db.Add(since - b.off - since.Abs()/clockDrift)
}

// reading returns the latest reading and the process's time since it
// (monotonic when both have a monotonic reading), and starts a new read in
// the background when it is due.
func (c *Clock) reading() (*clockReading, time.Duration) {
	b, l := c.base.Load(), c.local()
	every := clockResync
	if b.off > clockPrecise {
		every = clockRetry
	}
	if l.Sub(b.tried) >= every && c.syncing.CompareAndSwap(false, true) {
		go c.resync()
	}
	return b, l.Sub(b.local)
}

// resync reads the database's clock again. If the database does not
// answer, the clock goes on from its last reading, and says so once.
func (c *Clock) resync() {
	defer c.syncing.Store(false)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := c.sync(ctx)
	switch {
	case err == nil:
		if c.failing.CompareAndSwap(true, false) {
			c.log.LogAttrs(ctx, slog.LevelInfo, "the database's clock is read again")
		}
	case c.failing.CompareAndSwap(false, true):
		c.log.LogAttrs(ctx, slog.LevelWarn, "the database's clock could not be read; the engine carries its last reading forward by the process's clock until it can",
			slog.String("error", err.Error()), slog.Duration("since_reading", c.local().Sub(c.base.Load().local)))
	}
}

// sync reads the database's clock and keeps the reading, unless the last
// one, carried forward, is the more precise (the read was slow).
func (c *Clock) sync(ctx context.Context) error {
	before := c.local()
	db, err := c.read(ctx)
	after := c.local()
	last := c.base.Load()
	if err != nil {
		if last != nil {
			c.base.Store(&clockReading{db: last.db, local: last.local, off: last.off, tried: after})
		}
		return err
	}
	off := after.Sub(before) / 2
	r := &clockReading{db: db.Add(off), local: after, off: off, tried: after}
	if last != nil && off > last.off+after.Sub(last.local)/clockDrift {
		r = &clockReading{db: last.db, local: last.local, off: last.off, tried: after}
	}
	c.base.Store(r)
	return nil
}

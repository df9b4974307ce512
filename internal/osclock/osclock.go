// Package osclock is the process's own clock as the engine reads it: the
// wall clock of the machine, which may be wrong. The engine takes its
// times from the database's clock and carries them forward by the
// process's monotonic clock, so a wrong wall clock moves nothing; tests
// and the chaos rig skew this one to show it.
package osclock

import (
	"sync/atomic"
	"time"
)

var skew atomic.Int64

// Now returns time.Now moved by the skew. Moving a time keeps its
// monotonic reading's differences, as a wrong wall clock does.
func Now() time.Time { return time.Now().Add(time.Duration(skew.Load())) }

// Skew sets how far this process's clock is off, for every engine in it.
func Skew(d time.Duration) { skew.Store(int64(d)) }

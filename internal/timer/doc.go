// Package timer fires durable timers.
//
// A durable timer is a row in the database: workflow.Sleep and
// workflow.NewTimer write one, and nothing else in the worker waits for it, no
// goroutine, no memory. A [Scanner] (the engine runs one per process) sleeps
// until the earliest timer is due, or until it is told that an earlier one was
// created, then fires every due timer in batches: each timer's TimerFired
// event and its run's ready workflow task are written in the transaction that
// deletes the timer's row. Any number of scanners may run against one database;
// each timer fires exactly once, and never before its time by the engine's
// clock, which in production is the database's (see engine.Options.NowFunc).
//
// A timer canceled by workflow code (workflow.Timer.Cancel) loses its row in
// the transaction that commits the cancellation; if it fired just before, the
// workflow ignores the TimerFired event. Because "due" is measured by
// [Options].NowFunc, a test that moves the clock (package durabletest) makes
// a week-long timer fire at once.
package timer

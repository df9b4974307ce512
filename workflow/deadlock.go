package workflow

import (
	"bytes"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/durable-go/durable/internal/wfexec"
)

// defaultDeadlockTimeout is how long workflow code may run without yielding
// when wfexec.Options.DeadlockTimeout is zero.
const defaultDeadlockTimeout = time.Second

// DeadlockError reports workflow code that did not yield: a coroutine of run
// RunID ran for Timeout without returning or making a blocking workflow call
// ([Future.Get], [Sleep], [Channel.Receive], [Selector.Select], [Await]),
// usually a loop that makes no such call. The workflow task fails and is
// retried later, as after a panic; the run itself does not fail.
//
// Go cannot stop a goroutine: the coroutine runs on, detached from the run,
// until it yields or returns, and then exits. Nothing it does from the
// deadline on is recorded: it belongs to an executor that was discarded.
// While it runs, every task of the run on this process fails at once with
// this error instead of starting another copy of the code.
type DeadlockError struct {
	RunID string
	// Coroutine is "main" for the workflow function, "go" for one started
	// with [Go].
	Coroutine string
	Timeout   time.Duration
	// Pos is the file:line the coroutine was running at the deadline: its
	// innermost frame of user code (not the Go runtime's, the standard
	// library's or this package's).
	Pos string
	// Stack is the coroutine's goroutine stack at the deadline.
	Stack string
}

func (e *DeadlockError) Error() string {
	pos := e.Pos
	if pos == "" {
		pos = "an unknown place"
	}
	return fmt.Sprintf("deadlock in run %s: workflow code (coroutine %q) did not yield within %s, running at %s; "+
		"a workflow must not loop or compute without a blocking workflow call: move the work to an activity, "+
		"or raise engine.Options.WorkflowDeadlockTimeout", e.RunID, e.Coroutine, e.Timeout, pos)
}

// spinning holds, by run ID, the error of each abandoned coroutine that is
// still running, and spinners counts them: a run's next task fails at once
// while one of its coroutines still spins in this process, instead of
// leaving one more goroutine behind at each retry.
var (
	spinning sync.Map // run ID -> *DeadlockError
	spinners atomic.Int64
)

// options returns the options of the executor d is part of.
func (d *dispatcher) options() *wfexec.Options { return d.opts }

// bound is how long a coroutine may run without yielding; 0 means forever.
func (d *dispatcher) bound() time.Duration {
	switch t := d.options().DeadlockTimeout; {
	case t < 0:
		return 0
	case t == 0:
		return defaultDeadlockTimeout
	default:
		return t
	}
}

// deadlocked returns the error that poisoned d, or that of a coroutine of
// the same run still spinning in this process; d then runs nothing.
func (d *dispatcher) deadlocked() error {
	if d.dead != nil {
		return d.dead
	}
	if spinners.Load() == 0 {
		return nil
	}
	if id := d.options().RunID; id != "" {
		if err, ok := spinning.Load(id); ok {
			d.dead = err.(*DeadlockError)
			return d.dead
		}
	}
	return nil
}

// watchdog bounds how long the dispatcher waits for a coroutine it resumed.
// While the dispatcher runs coroutines, a timer checks how long the current
// one has run, and once it has run for the bound, wakes the dispatcher by
// sending true on the coroutine's yielded channel. A resume costs a clock
// read and a few atomic stores; the timer is armed once per run, not per
// resume (a timer and a select per resume, tried first, made
// BenchmarkReplay about a third slower).
type watchdog struct {
	bound time.Duration // of this run; 0: no bound
	timer *time.Timer
	armed atomic.Bool
	cur   atomic.Pointer[coroutine] // the coroutine resumed last
	began atomic.Int64              // when it was, by monoNow; 0 once it yielded
}

// monoBase is the origin of monoNow.
var monoBase = time.Now()

// monoNow is the time since monoBase on the monotonic clock, never 0.
func monoNow() int64 { return int64(time.Since(monoBase)) + 1 }

// arm starts the watch, for a run of the dispatcher.
func (w *watchdog) arm(bound time.Duration) {
	w.bound = bound
	if bound == 0 {
		return
	}
	w.armed.Store(true)
	if w.timer == nil {
		w.timer = time.AfterFunc(bound, func() { w.check(bound) })
	} else {
		w.timer.Reset(bound)
	}
}

// disarm ends the watch. A check already under way may run once more, and
// finds it disarmed.
func (w *watchdog) disarm() {
	if w.bound == 0 {
		return
	}
	w.armed.Store(false)
	w.timer.Stop()
}

// resumed notes that c is resumed now, and returns the time for wait.
func (w *watchdog) resumed(c *coroutine) int64 {
	if w.bound == 0 {
		return 0
	}
	now := monoNow()
	w.cur.Store(c)
	w.began.Store(now)
	return now
}

// check runs on the timer's goroutine. cur and began are read apart, so a
// wake may reach the wrong resume, or nobody; wait tells, and the timer
// looks again.
func (w *watchdog) check(bound time.Duration) {
	if !w.armed.Load() {
		return
	}
	next := bound
	if began := w.began.Load(); began != 0 {
		if ran := time.Duration(monoNow() - began); ran < bound {
			next = bound - ran
		} else {
			select {
			case w.cur.Load().yielded <- true:
			default: // the dispatcher is between two waits
				next = time.Millisecond
			}
		}
	}
	w.timer.Reset(next)
}

// wait waits for coroutine c, resumed at began, to yield, for at most the
// deadlock bound. It reports false if c did not yield in time.
func (d *dispatcher) wait(c *coroutine, began int64) bool {
	for <-c.yielded { // the watchdog's wake
		if time.Duration(monoNow()-began) >= d.w.bound {
			return false
		}
		// A late wake, meant for an earlier resume: wait on.
	}
	if d.w.bound != 0 {
		d.w.began.Store(0)
	}
	return true
}

// abandon gives up on coroutine c, which did not yield in time, and poisons
// d: from now on run returns the error, close leaves c alone, and c exits at
// its next yield without handing anything back.
func (d *dispatcher) abandon(c *coroutine) *DeadlockError {
	o := d.options()
	stack := goroutineStack(c.gid)
	err := &DeadlockError{RunID: o.RunID, Coroutine: c.name, Timeout: d.bound(), Pos: stackPos(stack), Stack: stack}
	d.dead, d.spinner = err, c
	c.gone = make(chan struct{})
	if o.RunID != "" {
		c.runID = o.RunID
		spinning.Store(o.RunID, err)
		spinners.Add(1)
	}
	c.dead = err
	close(c.abandon) // after the writes above, which c reads once it sees this
	go c.drain()
	return err
}

// drain takes, for nobody, what abandoned coroutine c hands back when it
// yields, until it has exited.
func (c *coroutine) drain() {
	for {
		select {
		case <-c.yielded:
		case <-c.gone:
			return
		}
	}
}

// left is called on abandoned coroutine c's goroutine as it exits.
func (c *coroutine) left() {
	if c.runID != "" {
		spinning.CompareAndDelete(c.runID, c.dead)
		spinners.Add(-1)
	}
	close(c.gone)
}

// goroutineID returns the calling goroutine's ID, as its stack trace names
// it: the only way to find that goroutine's stack later.
func goroutineID() uint64 {
	var b [64]byte
	s := b[:runtime.Stack(b[:], false)]
	s = bytes.TrimPrefix(s, []byte("goroutine "))
	if i := bytes.IndexByte(s, ' '); i > 0 {
		s = s[:i]
	}
	id, _ := strconv.ParseUint(string(s), 10, 64)
	return id
}

// maxStackDump bounds the buffer that the stacks of all goroutines are
// read into to find one of them.
const maxStackDump = 64 << 20

// goroutineStack returns the stack of goroutine id, or "" if it is not
// found.
func goroutineStack(id uint64) string {
	if id == 0 {
		return ""
	}
	buf := make([]byte, 64<<10)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) || len(buf) >= maxStackDump {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	head := []byte(fmt.Sprintf("goroutine %d [", id))
	for block := range bytes.SplitSeq(buf, []byte("\n\n")) {
		if bytes.HasPrefix(block, head) {
			return string(block)
		}
	}
	return ""
}

// stackPos returns the file:line of the innermost frame of a goroutine's
// stack trace that is user code: neither this package's nor the standard
// library's (failing that, the innermost outside the runtime and this
// package).
func stackPos(stack string) string {
	lines := strings.Split(stack, "\n")
	fallback := ""
	for i := 1; i+1 < len(lines); i += 2 { // the header, then per frame a function and "\tfile:line +0x..."
		fn, at := lines[i], strings.TrimSpace(lines[i+1])
		if strings.HasPrefix(fn, "runtime.") || strings.HasPrefix(fn, pkgPrefix) || strings.HasPrefix(fn, "created by ") {
			continue
		}
		if j := strings.LastIndex(at, " +0x"); j > 0 {
			at = at[:j]
		}
		if !standard(fn) {
			return at
		}
		if fallback == "" {
			fallback = at
		}
	}
	return fallback
}

// standard reports whether the function of a stack trace line, such as
// "sync/atomic.(*Bool).Load(...)", is in the standard library: the first
// element of its import path has no dot (and is not main).
func standard(fn string) bool {
	path := fn
	if i := strings.Index(path, "("); i > 0 {
		path = path[:i]
	}
	if i := strings.LastIndex(path, "/"); i >= 0 {
		first, _, _ := strings.Cut(path, "/")
		return !strings.Contains(first, ".")
	}
	pkg, _, _ := strings.Cut(path, ".")
	return pkg != "main"
}

package workflow

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/durable-go/durable/internal/wfexec"
)

// dispatcher runs a workflow's coroutines one at a time. Each coroutine is a
// goroutine, but control passes between the dispatcher and exactly one
// coroutine through channels, so workflow code never runs in parallel and
// always in the same order: the order in which coroutines were created, round
// after round, until a round in which none of them can make progress.
//
// A coroutine that does not yield within the deadlock bound is abandoned
// (deadlock.go): the dispatcher is poisoned, and the coroutine, which Go
// cannot stop, exits at its next yield without handing control back.
type dispatcher struct {
	coros   []*coroutine
	current *coroutine
	closing bool

	opts    *wfexec.Options // the executor's: the run and the deadlock bound
	w       watchdog        // bounds each wait for a coroutine to yield
	dead    *DeadlockError  // set once the dispatcher is poisoned: it runs nothing more
	spinner *coroutine      // the coroutine it abandoned, if it did
}

type coroutine struct {
	name     string
	resume   chan bool // true: run on; false: exit
	yielded  chan bool // false from the coroutine; true from the watchdog, if it ran too long
	started  bool
	finished bool
	progress bool
	panic    *PanicError

	gid     uint64        // its goroutine's ID, to find its stack (deadlock.go)
	abandon chan struct{} // closed when it did not yield in time
	// Set before abandon is closed: what to report and undo as it exits.
	dead  *DeadlockError
	runID string
	gone  chan struct{} // closed as it exits
}

// spawn adds a coroutine that runs fn once the dispatcher reaches it.
func (d *dispatcher) spawn(name string, fn func()) {
	if c := d.current; c != nil && c.abandoned() {
		return // called by an abandoned coroutine: nothing will run fn
	}
	c := &coroutine{name: name, resume: make(chan bool), yielded: make(chan bool), abandon: make(chan struct{})}
	d.coros = append(d.coros, c)
	track := d.bound() > 0
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c.panic = &PanicError{Value: r, Stack: string(debug.Stack())}
			}
			c.finished = true
			if !c.yield() {
				c.left()
			}
		}()
		if track {
			c.gid = goroutineID() // before the first resume, which makes it visible to run
		}
		if !<-c.resume {
			return
		}
		fn()
	}()
}

// run resumes coroutines until none can make progress. It returns the
// *PanicError of a coroutine that panicked, and a *DeadlockError if one did
// not yield within the deadlock bound; then, and once poisoned, it returns
// that error at once.
func (d *dispatcher) run() error {
	if err := d.deadlocked(); err != nil {
		return err
	}
	d.w.arm(d.bound())
	defer d.w.disarm()
	for {
		progress := false
		for i := 0; i < len(d.coros); i++ { // coroutines spawned in this round run in it too
			c := d.coros[i]
			if c.finished {
				continue
			}
			if !c.started {
				c.started = true
				progress = true
			}
			c.progress = false
			d.current = c
			began := d.w.resumed(c)
			c.resume <- true
			if !d.wait(c, began) {
				return d.abandon(c) // d.current stays: c may still read it
			}
			d.current = nil
			if c.panic != nil {
				return c.panic
			}
			if c.progress || c.finished {
				progress = true
			}
		}
		live := d.coros[:0]
		for _, c := range d.coros {
			if !c.finished {
				live = append(live, c)
			}
		}
		clear(d.coros[len(live):])
		d.coros = live
		if !progress {
			return nil
		}
	}
}

// await blocks the running coroutine until cond holds. It must be called
// from workflow code, on a coroutine of d.
func (d *dispatcher) await(cond func() bool) {
	c := d.current
	if c == nil {
		panic("workflow: blocking call outside workflow code (use the workflow.Context passed to the workflow function, not a goroutine of your own)")
	}
	if d.closing {
		runtime.Goexit()
	}
	for !cond() {
		if !c.yield() {
			runtime.Goexit() // abandoned: unwind, running defers, and exit
		}
		if !<-c.resume {
			runtime.Goexit() // the run is being closed: unwind, running defers
		}
	}
	c.progress = true
}

// yield hands control back to the dispatcher. It reports false if c was
// abandoned: what it handed back went to nobody (see drain).
func (c *coroutine) yield() bool {
	c.yielded <- false
	return !c.abandoned()
}

// abandoned reports whether c was abandoned.
func (c *coroutine) abandoned() bool {
	select {
	case <-c.abandon:
		return true
	default:
		return false
	}
}

// close ends every coroutine that has not finished. Their deferred functions
// run; blocking calls inside them exit at once. If a coroutine was
// abandoned, the others are ended only once it has exited, in the
// background, so that workflow code never runs on two goroutines at once;
// until then they wait, parked.
func (d *dispatcher) close() {
	if c := d.spinner; c != nil {
		go func() {
			<-c.gone
			d.closeRest()
		}()
		return
	}
	d.closeRest()
}

// closeRest ends every coroutine that has not finished, except the abandoned
// one, which has exited.
func (d *dispatcher) closeRest() {
	d.closing = true
	d.w.arm(d.bound())
	for _, c := range d.coros {
		if c.finished || c == d.spinner {
			continue
		}
		d.current = c
		began := d.w.resumed(c)
		c.resume <- false
		if !d.wait(c, began) { // a deferred function does not yield either
			d.abandon(c)
			// Disarmed before close, whose closeRest arms the watchdog
			// again on another goroutine once c is gone: a deferred
			// disarm raced with it (the race detector, in the chaos
			// rig's short mode, 2026-12-03).
			d.w.disarm()
			d.close()
			return
		}
	}
	d.w.disarm()
	d.current = nil
	d.coros = nil
}

// PanicError reports a panic in workflow code. The workflow task that ran the
// code fails and is retried later; the run itself does not fail, so a fix can
// be deployed.
type PanicError struct {
	Value any
	Stack string
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("workflow panicked: %v", e.Value)
}

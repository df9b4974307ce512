package workflow

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// dispatcher runs a workflow's coroutines one at a time. Each coroutine is a
// goroutine, but control passes between the dispatcher and exactly one
// coroutine through channels, so workflow code never runs in parallel and
// always in the same order: the order in which coroutines were created, round
// after round, until a round in which none of them can make progress.
type dispatcher struct {
	coros   []*coroutine
	current *coroutine
	closing bool
}

type coroutine struct {
	name     string
	resume   chan bool // true: run on; false: exit
	yielded  chan struct{}
	started  bool
	finished bool
	progress bool
	panic    *PanicError
}

// spawn adds a coroutine that runs fn once the dispatcher reaches it.
func (d *dispatcher) spawn(name string, fn func()) {
	c := &coroutine{name: name, resume: make(chan bool), yielded: make(chan struct{})}
	d.coros = append(d.coros, c)
	go func() {
		defer func() {
			if r := recover(); r != nil {
				c.panic = &PanicError{Value: r, Stack: string(debug.Stack())}
			}
			c.finished = true
			c.yielded <- struct{}{}
		}()
		if !<-c.resume {
			return
		}
		fn()
	}()
}

// run resumes coroutines until none can make progress. It returns the
// *PanicError of a coroutine that panicked.
func (d *dispatcher) run() error {
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
			c.resume <- true
			<-c.yielded
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
		c.yielded <- struct{}{}
		if !<-c.resume {
			runtime.Goexit() // the run is being closed: unwind, running defers
		}
	}
	c.progress = true
}

// close ends every coroutine that has not finished. Their deferred functions
// run; blocking calls inside them exit at once.
func (d *dispatcher) close() {
	d.closing = true
	for _, c := range d.coros {
		if c.finished {
			continue
		}
		d.current = c
		c.resume <- false
		<-c.yielded
	}
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

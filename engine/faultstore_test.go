package engine

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// fate is what the fault injector does to one store call.
type fate int

const (
	fateNone fate = iota
	// fateBefore fails the call before it runs: nothing happened.
	fateBefore
	// fateAfter runs the call and then reports a failure: it happened, and
	// the caller believes it did not (the ambiguous commit).
	fateAfter
)

// injectedError is the timeout an injected fault reports.
type injectedError struct {
	method string
	ran    bool
}

func (e *injectedError) Error() string {
	if e.ran {
		return fmt.Sprintf("injected fault: %s: timeout after the statement ran (it committed)", e.method)
	}
	return fmt.Sprintf("injected fault: %s: timeout before the statement ran", e.method)
}

// Timeout and Temporary make it a net.Error, a network timeout to whoever
// asks.
func (e *injectedError) Timeout() bool   { return true }
func (e *injectedError) Temporary() bool { return true }

func isInjected(err error) bool {
	var ie *injectedError
	return errors.As(err, &ie)
}

// faultInjector decides the fate of store calls and counts what it did.
// Each method has its own random stream from the seed, so the n-th call of
// a method meets the same fate on every run with that seed; which caller
// makes the n-th call is up to the scheduler.
type faultInjector struct {
	seed uint64
	// rate is the chance of each kind of fault per call (reads only fail
	// before: a read that ran and then failed is the same as one that did not).
	rate float64

	mu      sync.Mutex
	streams map[string]*rand.Rand
	scripts map[string][]fate // fates forced on the next calls of a method
	calls   map[string]int
	before  map[string]int
	after   map[string]int
	// done counts, per method and key (workflow ID or job key), the calls
	// that did their write, reported or not; ambiguousKeys those of them
	// that reported a timeout.
	done, ambiguousKeys map[string]map[string]int
}

func newFaultInjector(seed uint64, rate float64) *faultInjector {
	return &faultInjector{
		seed: seed, rate: rate,
		streams: map[string]*rand.Rand{}, scripts: map[string][]fate{},
		calls: map[string]int{}, before: map[string]int{}, after: map[string]int{},
		done: map[string]map[string]int{}, ambiguousKeys: map[string]map[string]int{},
	}
}

// wrap puts f between an engine and its store (newOnPool).
func (f *faultInjector) wrap(s store.Store) store.Store { return &faultStore{Store: s, f: f} }

// force makes the next calls of method meet fates, in order, before the
// random stream resumes.
func (f *faultInjector) force(method string, fates ...fate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[method] = append(f.scripts[method], fates...)
}

// roll draws the fate of one call, and says whether a script (force) set it.
func (f *faultInjector) roll(method string, write bool) (fate, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls[method]++
	if s := f.scripts[method]; len(s) > 0 {
		f.scripts[method] = s[1:]
		if s[0] == fateBefore {
			f.before[method]++
		}
		return s[0], true
	}
	r := f.streams[method]
	if r == nil {
		h := fnv.New64a()
		h.Write([]byte(method))
		r = rand.New(rand.NewPCG(f.seed, h.Sum64()))
		f.streams[method] = r
	}
	switch u := r.Float64(); {
	case u < f.rate:
		f.before[method]++
		return fateBefore, false
	case write && u < 2*f.rate:
		return fateAfter, false
	}
	return fateNone, false
}

// unspend puts a scripted fate back first in method's script.
func (f *faultInjector) unspend(method string, ft fate) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.scripts[method] = append([]fate{ft}, f.scripts[method]...)
}

// ambiguous counts an after-fault injected on a call of method for key
// (empty if the call has no key) and returns its error.
func (f *faultInjector) ambiguous(method, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.after[method]++
	if key != "" {
		if f.ambiguousKeys[method] == nil {
			f.ambiguousKeys[method] = map[string]int{}
		}
		f.ambiguousKeys[method][key]++
	}
	return &injectedError{method: method, ran: true}
}

// record counts a call of method that did its write for key.
func (f *faultInjector) record(method, key string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.done[method] == nil {
		f.done[method] = map[string]int{}
	}
	f.done[method][key]++
}

// doneFor returns how many calls of method did their write for key.
func (f *faultInjector) doneFor(method, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.done[method][key]
}

// keysDone returns how many keys calls of method did their write for.
func (f *faultInjector) keysDone(method string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.done[method])
}

// ambiguousFor returns how many calls of method for key did their write
// and reported a timeout.
func (f *faultInjector) ambiguousFor(method, key string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ambiguousKeys[method][key]
}

// counts returns the faults injected so far: before and after, by method.
func (f *faultInjector) counts() (calls, before, after map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return maps.Clone(f.calls), maps.Clone(f.before), maps.Clone(f.after)
}

// report is the counts as a table, one method a line.
func (f *faultInjector) report() string {
	calls, before, after := f.counts()
	var b strings.Builder
	fmt.Fprintf(&b, "%-22s %7s %7s %7s\n", "method", "calls", "before", "after")
	for _, m := range slices.Sorted(maps.Keys(calls)) {
		fmt.Fprintf(&b, "%-22s %7d %7d %7d\n", m, calls[m], before[m], after[m])
	}
	return b.String()
}

// faultStore is the engine's storage with faults injected: about rate of the
// calls fail before they run, and (for writes) about rate run and then
// report a timeout. Admin reads (Describe's lists, stats) pass through.
type faultStore struct {
	store.Store
	f *faultInjector
}

// read runs a read, failing it before it runs by the method's fate.
func read[T any](s *faultStore, method string, call func() (T, error)) (T, error) {
	if ft, _ := s.f.roll(method, false); ft == fateBefore {
		var zero T
		return zero, &injectedError{method: method}
	}
	return call()
}

// write runs a write by the method's fate; key (a workflow ID or job key,
// or empty) is what the write is for, to count ambiguous commits by key.
func write[T any](s *faultStore, method, key string, call func() (T, error)) (T, error) {
	ft, scripted := s.f.roll(method, true)
	if ft == fateBefore {
		var zero T
		return zero, &injectedError{method: method}
	}
	v, err := call()
	if err != nil && ft == fateAfter && scripted {
		// A real failure has nothing to make ambiguous; a forced
		// ambiguous commit waits for a write that commits. (A step
		// whose lease ran out on a loaded machine took one in CI.)
		s.f.unspend(method, ft)
	}
	if err != nil || ft != fateAfter {
		return v, err
	}
	var zero T
	return zero, s.f.ambiguous(method, key) // a timeout returns nothing
}

// write0 is write for a method that returns only an error.
func write0(s *faultStore, method string, call func() error) error {
	_, err := write(s, method, "", func() (struct{}, error) { return struct{}{}, call() })
	return err
}

// recorded returns what call returns, counting it as done for key if it
// succeeded.
func recorded[T any](s *faultStore, method, key string, call func() (T, error)) func() (T, error) {
	return func() (T, error) {
		v, err := call()
		if err == nil {
			s.f.record(method, key)
		}
		return v, err
	}
}

func (s *faultStore) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	return write(s, "CreateRun", in.WorkflowID, recorded(s, "CreateRun", in.WorkflowID, func() (store.Run, error) {
		r, err := s.Store.CreateRun(ctx, in)
		if err == nil && in.First != nil {
			s.f.record("EagerStart", in.WorkflowID) // the run came with its first task
		}
		return r, err
	}))
}

func (s *faultStore) GetRun(ctx context.Context, runID string) (store.Run, error) {
	return read(s, "GetRun", func() (store.Run, error) { return s.Store.GetRun(ctx, runID) })
}

func (s *faultStore) GetRunByWorkflowID(ctx context.Context, workflowID string) (store.Run, error) {
	return read(s, "GetRunByWorkflowID", func() (store.Run, error) { return s.Store.GetRunByWorkflowID(ctx, workflowID) })
}

func (s *faultStore) ListEvents(ctx context.Context, runID string, afterID int64) ([]history.Event, error) {
	return read(s, "ListEvents", func() ([]history.Event, error) { return s.Store.ListEvents(ctx, runID, afterID) })
}

func (s *faultStore) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	return write(s, "ClaimWorkflowTasks", "", func() ([]store.WorkflowTask, error) { return s.Store.ClaimWorkflowTasks(ctx, in) })
}

func (s *faultStore) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	method := "CommitWorkflowTask"
	if in.Outcome != nil { // a fused step: an activity outcome too
		method = "FusedStep"
	}
	return write(s, method, "", func() (store.Ready, error) { return s.Store.CommitWorkflowTask(ctx, in) })
}

func (s *faultStore) FailWorkflowTask(ctx context.Context, in store.FailWorkflowTaskParams) error {
	return write0(s, "FailWorkflowTask", func() error { return s.Store.FailWorkflowTask(ctx, in) })
}

func (s *faultStore) ReleaseWorkflowTasks(ctx context.Context, in store.ReleaseParams) error {
	return write0(s, "ReleaseWorkflowTasks", func() error { return s.Store.ReleaseWorkflowTasks(ctx, in) })
}

func (s *faultStore) ClaimActivityTasks(ctx context.Context, in store.ClaimParams) ([]store.ActivityTask, error) {
	return write(s, "ClaimActivityTasks", "", func() ([]store.ActivityTask, error) { return s.Store.ClaimActivityTasks(ctx, in) })
}

func (s *faultStore) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	return write(s, "ResolveActivity", "", func() (store.Ready, error) { return s.Store.ResolveActivity(ctx, in) })
}

func (s *faultStore) RetryActivity(ctx context.Context, in store.RetryActivityParams) error {
	return write0(s, "RetryActivity", func() error { return s.Store.RetryActivity(ctx, in) })
}

func (s *faultStore) NextDue(ctx context.Context, kind, queue string) (time.Time, bool, error) {
	type due struct {
		t  time.Time
		ok bool
	}
	d, err := read(s, "NextDue", func() (due, error) {
		t, ok, err := s.Store.NextDue(ctx, kind, queue)
		return due{t, ok}, err
	})
	return d.t, d.ok, err
}

func (s *faultStore) SignalRun(ctx context.Context, in store.SignalParams, event history.Attributes) (store.Ready, error) {
	return write(s, "SignalRun", in.WorkflowID, recorded(s, "SignalRun", in.WorkflowID, func() (store.Ready, error) { return s.Store.SignalRun(ctx, in, event) }))
}

func (s *faultStore) TerminateRun(ctx context.Context, in store.TerminateParams) (store.Ready, error) {
	return write(s, "TerminateRun", in.WorkflowID, recorded(s, "TerminateRun", in.WorkflowID, func() (store.Ready, error) { return s.Store.TerminateRun(ctx, in) }))
}

func (s *faultStore) HeartbeatActivity(ctx context.Context, in store.HeartbeatParams) error {
	return write0(s, "HeartbeatActivity", func() error { return s.Store.HeartbeatActivity(ctx, in) })
}

func (s *faultStore) EnqueueJob(ctx context.Context, in store.EnqueueJobParams) (int64, bool, error) {
	type job struct {
		id       int64
		existing bool
	}
	j, err := write(s, "EnqueueJob", in.Task.IdempotencyKey, func() (job, error) {
		id, existing, err := s.Store.EnqueueJob(ctx, in)
		if err == nil && !existing {
			s.f.record("EnqueueJob", in.Task.IdempotencyKey) // a job was created
		}
		return job{id, existing}, err
	})
	return j.id, j.existing, err
}

func (s *faultStore) ListDeadLetters(ctx context.Context, fl store.DeadLetterFilter) ([]store.DeadLetter, error) {
	return read(s, "ListDeadLetters", func() ([]store.DeadLetter, error) { return s.Store.ListDeadLetters(ctx, fl) })
}

func (s *faultStore) GetDeadLetter(ctx context.Context, id int64) (store.DeadLetter, error) {
	return read(s, "GetDeadLetter", func() (store.DeadLetter, error) { return s.Store.GetDeadLetter(ctx, id) })
}

func (s *faultStore) RedriveDeadLetter(ctx context.Context, in store.RedriveParams) (store.RedriveResult, error) {
	return write(s, "RedriveDeadLetter", "", func() (store.RedriveResult, error) { return s.Store.RedriveDeadLetter(ctx, in) })
}

func (s *faultStore) ReleaseActivityTasks(ctx context.Context, in store.ReleaseParams) error {
	return write0(s, "ReleaseActivityTasks", func() error { return s.Store.ReleaseActivityTasks(ctx, in) })
}

func (s *faultStore) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	type out struct {
		f     store.Fired
		tasks []store.WorkflowTask
	}
	o, err := write(s, "FireTimers", "", func() (out, error) {
		f, tasks, err := s.Store.FireTimers(ctx, in)
		return out{f, tasks}, err
	})
	return o.f, o.tasks, err
}

func (s *faultStore) NextTimer(ctx context.Context, skip []string) (time.Time, bool, error) {
	type next struct {
		t  time.Time
		ok bool
	}
	n, err := read(s, "NextTimer", func() (next, error) {
		t, ok, err := s.Store.NextTimer(ctx, skip)
		return next{t, ok}, err
	})
	return n.t, n.ok, err
}

var _ store.Store = (*faultStore)(nil)

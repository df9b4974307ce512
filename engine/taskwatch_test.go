package engine_test

import (
	"context"
	"sync"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// taskWatch sees, through the stores of the engines it wraps, when each
// workflow task begins (a claim of any kind returns it) and ends (the
// commit or failure presenting its token returns, or its worker gives its
// claims back), and counts the times a run's task began while another of
// the run's was held. A fused step or a merged start runs on no claim: it
// is a task that begins and ends with its write.
type taskWatch struct {
	mu       sync.Mutex
	held     map[string]map[int64]string // run -> token -> worker
	tasks    int
	overlaps int
}

func newTaskWatch() *taskWatch { return &taskWatch{held: map[string]map[int64]string{}} }

// wrap is an engine.NewWrapped wrapper for worker's store.
func (w *taskWatch) wrap(worker string) func(store.Store) store.Store {
	return func(s store.Store) store.Store { return &watchedStore{Store: s, w: w, worker: worker} }
}

func (w *taskWatch) begin(worker string, tasks ...store.WorkflowTask) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, t := range tasks {
		if t.Token == 0 {
			continue
		}
		w.tasks++
		if len(w.held[t.RunID]) > 0 {
			w.overlaps++
		}
		if w.held[t.RunID] == nil {
			w.held[t.RunID] = map[int64]string{}
		}
		w.held[t.RunID][t.Token] = worker
	}
}

func (w *taskWatch) end(runID string, token int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if token == 0 { // a task on no claim: it begins and ends here
		w.tasks++
		if len(w.held[runID]) > 0 {
			w.overlaps++
		}
		return
	}
	delete(w.held[runID], token)
}

func (w *taskWatch) endAll(worker string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, tokens := range w.held {
		for token, by := range tokens {
			if by == worker {
				delete(tokens, token)
			}
		}
	}
}

func (w *taskWatch) counts() (tasks, overlaps int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tasks, w.overlaps
}

type watchedStore struct {
	store.Store
	w      *taskWatch
	worker string
}

func (s *watchedStore) ClaimWorkflowTasks(ctx context.Context, in store.ClaimParams) ([]store.WorkflowTask, error) {
	tasks, err := s.Store.ClaimWorkflowTasks(ctx, in)
	s.w.begin(s.worker, tasks...)
	return tasks, err
}

func (s *watchedStore) FireTimers(ctx context.Context, in store.FireTimersParams) (store.Fired, []store.WorkflowTask, error) {
	f, tasks, err := s.Store.FireTimers(ctx, in)
	s.w.begin(s.worker, tasks...)
	return f, tasks, err
}

func (s *watchedStore) CreateRun(ctx context.Context, in store.CreateRunParams) (store.Run, error) {
	r, err := s.Store.CreateRun(ctx, in)
	switch {
	case err != nil:
	case r.Token != 0:
		s.w.begin(s.worker, store.WorkflowTask{RunID: r.RunID, Token: r.Token})
	case in.First != nil: // the first task's commands, recorded with the start
		s.w.end(r.RunID, 0)
	}
	return r, err
}

func (s *watchedStore) CommitWorkflowTask(ctx context.Context, in store.CommitWorkflowTaskParams) (store.Ready, error) {
	r, err := s.Store.CommitWorkflowTask(ctx, in)
	if err == nil || in.Token != 0 {
		s.w.end(in.RunID, in.Token)
	}
	s.w.begin(s.worker, r.WorkflowTasks...)
	return r, err
}

func (s *watchedStore) FailWorkflowTask(ctx context.Context, in store.FailWorkflowTaskParams) error {
	err := s.Store.FailWorkflowTask(ctx, in)
	s.w.end(in.RunID, in.Token)
	return err
}

func (s *watchedStore) ReleaseWorkflowTasks(ctx context.Context, in store.ReleaseParams) error {
	s.w.endAll(in.WorkerID)
	return s.Store.ReleaseWorkflowTasks(ctx, in)
}

func (s *watchedStore) ResolveActivity(ctx context.Context, in store.ResolveActivityParams) (store.Ready, error) {
	r, err := s.Store.ResolveActivity(ctx, in)
	s.w.begin(s.worker, r.WorkflowTasks...)
	return r, err
}

func (s *watchedStore) SignalRun(ctx context.Context, in store.SignalParams, ev history.Attributes) (store.Ready, error) {
	r, err := s.Store.SignalRun(ctx, in, ev)
	s.w.begin(s.worker, r.WorkflowTasks...)
	return r, err
}

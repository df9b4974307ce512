// Command goworkflows measures go-workflows with its SQLite backend on
// durable-bench's W1 and W2 workloads, on a fresh SQLite file in a
// temporary directory (no DATABASE_URL).
//
//	cd bench/peers && go run ./goworkflows -n 2000
//
// It is the embedded-store peer of durable's SQLite store: one process runs
// a go-workflows worker (the workflows and the activity registered) and a
// client on one SQLite backend, as go-workflows' README shows; a start is
// client.CreateWorkflowInstance and its result client.GetWorkflowResult.
// See ../README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/cschleiden/go-workflows/backend"
	"github.com/cschleiden/go-workflows/backend/sqlite"
	"github.com/cschleiden/go-workflows/client"
	"github.com/cschleiden/go-workflows/worker"
	"github.com/cschleiden/go-workflows/workflow"
	"github.com/google/uuid"

	"github.com/durable-go/durable/bench/peers/internal/peerbench"
)

// Noop is the no-op activity: x -> x+1.
func Noop(_ context.Context, x int) (int, error) { return x + 1, nil }

// ThreeNoops is W1's workflow: three Noops in a row.
func ThreeNoops(ctx workflow.Context, x int) (int, error) {
	for range peerbench.Three {
		var err error
		if x, err = noop(ctx, x); err != nil {
			return 0, err
		}
	}
	return x, nil
}

// OneNoop is W2's workflow: one Noop.
func OneNoop(ctx workflow.Context, x int) (int, error) { return noop(ctx, x) }

// noop runs the Noop activity with go-workflows' default activity options
// (up to 3 attempts).
func noop(ctx workflow.Context, x int) (int, error) {
	return workflow.ExecuteActivity[int](ctx, workflow.DefaultActivityOptions, Noop, x).Get(ctx)
}

// resultTimeout is GetWorkflowResult's timeout (0 would be its default of
// 20 s, less than a slow W1 run may take); the run's context bounds the
// wait too.
const resultTimeout = 30 * time.Minute

// noConns is why -conns does not apply.
const noConns = "go-workflows' SQLite backend uses one connection (NewSqliteBackend calls db.SetMaxOpenConns(1)), and has no option for it"

// openBackend opens go-workflows' SQLite backend on the file path, applying
// its migrations if migrate. NewSqliteBackend panics where it fails; that
// is returned as an error.
func openBackend(path string, migrate bool, log *slog.Logger) (b backend.Backend, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("go-workflows' SQLite backend on %s: %v", path, r)
		}
	}()
	return sqlite.NewSqliteBackend(path,
		sqlite.WithApplyMigrations(migrate),
		sqlite.WithBackendOptions(backend.WithLogger(log)),
	), nil
}

type engine struct {
	b      backend.Backend
	w      *worker.Worker
	c      *client.Client
	cancel context.CancelFunc // the worker's
}

// open starts a worker with the workflows and the activity registered, and
// a client, on one SQLite backend on the file path. poll, if not 0,
// replaces the worker's polling intervals (go-workflows' default: 200 ms).
func open(ctx context.Context, path string, poll time.Duration, log *slog.Logger) (*engine, error) {
	b, err := openBackend(path, false, log)
	if err != nil {
		return nil, err
	}
	opts := worker.DefaultOptions
	if poll > 0 {
		opts.WorkflowPollingInterval = poll
		opts.ActivityPollingInterval = poll
	}
	w := worker.New(b, &opts)
	if err := errors.Join(
		w.RegisterWorkflow(ThreeNoops),
		w.RegisterWorkflow(OneNoop),
		w.RegisterActivity(Noop),
	); err != nil {
		return nil, errors.Join(fmt.Errorf("register: %w", err), b.Close())
	}
	wctx, cancel := context.WithCancel(ctx)
	if err := w.Start(wctx); err != nil {
		cancel()
		return nil, errors.Join(fmt.Errorf("start worker: %w", err), b.Close())
	}
	return &engine{b: b, w: w, c: client.New(b), cancel: cancel}, nil
}

func (e *engine) Start(ctx context.Context, steps, x int) (func(context.Context) (int, error), error) {
	wf := ThreeNoops
	if steps == peerbench.One {
		wf = OneNoop
	}
	inst, err := e.c.CreateWorkflowInstance(ctx, client.WorkflowInstanceOptions{InstanceID: uuid.NewString()}, wf, x)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) (int, error) {
		return client.GetWorkflowResult[int](ctx, e.c, inst, resultTimeout)
	}, nil
}

// Stop stops the worker's pollers, waits for the tasks in hand to finish
// and closes the backend (its one connection).
func (e *engine) Stop(context.Context) error {
	e.cancel()
	return errors.Join(e.w.WaitForCompletion(), e.b.Close())
}

func main() {
	var poll time.Duration
	peerbench.Main(func(fs *flag.FlagSet) {
		fs.DurationVar(&poll, "poll", 0, "the worker's WorkflowPollingInterval and ActivityPollingInterval, its wait after a poll that found no task; 0 keeps go-workflows' default (200 ms)")
	}, func() peerbench.Peer {
		name := "go-workflows"
		interval := "default (200 ms)"
		if poll > 0 {
			name += "-poll-" + poll.String()
			interval = poll.String()
		}
		log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		return peerbench.Peer{
			Name:    name,
			Store:   peerbench.SQLite,
			NoConns: noConns,
			Notes: []string{
				"go-workflows v1.2.0, SQLite backend (sqlite.NewSqliteBackend: WAL, one connection): worker.New with worker.DefaultOptions (2 workflow and 2 activity pollers, no limit on parallel tasks), workflow and activity polling interval " + interval + ", in this process with a client.Client on the same backend.",
				"Activities by workflow.ExecuteActivity with workflow.DefaultActivityOptions; start by client.CreateWorkflowInstance, result by client.GetWorkflowResult, which polls the instance's state with an exponential backoff (1 ms growing by 1.5x to 1 s, randomized by 50%).",
			},
			// The backend applies its migrations when it opens (the
			// default); the engines of the workloads open it without.
			Setup: func(_ context.Context, path string, _ int) error {
				b, err := openBackend(path, true, log)
				if err != nil {
					return err
				}
				return b.Close()
			},
			Open: func(ctx context.Context, path string, _ int) (peerbench.Engine, error) {
				return open(ctx, path, poll, log)
			},
		}
	})
}

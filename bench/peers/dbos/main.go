// Command dbos measures DBOS Transact Go on durable-bench's W1 and W2
// workloads, on this machine's PostgreSQL (DATABASE_URL).
//
//	cd bench/peers && go run ./dbos -n 2000
//
// By default a workflow is started with dbos.RunWorkflow and runs at once in
// a goroutine of the starting process (DBOS's default path); -queue enqueues
// it on a DBOS queue with a worker concurrency of 32 instead. See
// ../README.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/dbos-inc/dbos-transact-golang/dbos"

	"github.com/durable-go/durable/bench/peers/internal/peerbench"
)

// ThreeNoops is W1's workflow: three no-op steps x -> x+1 in a row.
func ThreeNoops(ctx dbos.Context, x int) (int, error) {
	for range peerbench.Three {
		var err error
		if x, err = noop(ctx, x); err != nil {
			return 0, err
		}
	}
	return x, nil
}

// OneNoop is W2's workflow: one no-op step.
func OneNoop(ctx dbos.Context, x int) (int, error) { return noop(ctx, x) }

// noop runs the step x -> x+1.
func noop(ctx dbos.Context, x int) (int, error) {
	return dbos.RunAsStep(ctx, func(context.Context) (int, error) { return x + 1, nil }, dbos.WithStepName("Noop"))
}

const (
	queueName        = "peerbench"
	queueConcurrency = 32
	queuePoll        = 5 * time.Millisecond
)

type engine struct {
	ctx   dbos.Context
	queue dbos.Queue    // nil: run at once
	poll  time.Duration // GetResult's polling interval; 0: DBOS's default
}

// newContext launches a DBOS context on a pool of conns connections, with the workflows registered (and the queue, with useQueue).
func newContext(ctx context.Context, dbURL string, conns int, useQueue bool, poll time.Duration) (*engine, error) {
	sep := "?"
	if strings.Contains(dbURL, "?") {
		sep = "&"
	}
	dctx, err := dbos.NewContext(ctx, dbos.Config{
		AppName: "peerbench",
		// DBOS opens and closes its own pool; pool_max_conns is pgx's
		// pool size (DBOS's own default is 20, as is -conns's).
		DatabaseURL: fmt.Sprintf("%s%spool_max_conns=%d", dbURL, sep, conns),
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return nil, err
	}
	dbos.RegisterWorkflow(dctx, ThreeNoops)
	dbos.RegisterWorkflow(dctx, OneNoop)
	e := &engine{ctx: dctx, poll: poll}
	if useQueue {
		q, err := dbos.RegisterQueue(dctx, queueName,
			dbos.WithWorkerConcurrency(queueConcurrency),
			dbos.WithQueueBasePollingInterval(queuePoll),
			dbos.WithQueueOnConflict(dbos.QueueConflictAlwaysUpdate))
		if err != nil {
			return nil, fmt.Errorf("register queue: %w", err)
		}
		e.queue = q
	}
	if err := dbos.Launch(dctx); err != nil {
		return nil, fmt.Errorf("launch: %w", err)
	}
	return e, nil
}

func (e *engine) Start(_ context.Context, steps, x int) (func(context.Context) (int, error), error) {
	wf := ThreeNoops
	if steps == peerbench.One {
		wf = OneNoop
	}
	var opts []dbos.WorkflowOption
	if e.queue != nil {
		opts = append(opts, dbos.WithQueue(e.queue))
	}
	h, err := dbos.RunWorkflow(e.ctx, wf, x, opts...)
	if err != nil {
		return nil, err
	}
	var ropts []dbos.GetResultOption
	if e.poll > 0 {
		ropts = append(ropts, dbos.WithHandlePollingInterval(e.poll))
	}
	return func(context.Context) (int, error) { return h.GetResult(ropts...) }, nil
}

func (e *engine) Stop(context.Context) error {
	return dbos.Shutdown(e.ctx, 30*time.Second)
}

func main() {
	var (
		useQueue bool
		poll     time.Duration
	)
	peerbench.Main(func(fs *flag.FlagSet) {
		fs.DurationVar(&poll, "poll", 0, "handle.GetResult's polling interval (dbos.WithHandlePollingInterval), used where the handle polls the database (a queued workflow's); 0 keeps DBOS's default (1 s)")
		fs.BoolVar(&useQueue, "queue", false, fmt.Sprintf("enqueue workflows on a DBOS queue (worker concurrency %d, base polling interval %s) instead of running them at once in the starting process", queueConcurrency, queuePoll))
	}, func() peerbench.Peer {
		name, notes := "dbos", []string{
			"DBOS Transact Go v1.8.0: dbos.RunWorkflow runs each workflow at once in a goroutine of this process (no concurrency limit on that path); result by handle.GetResult.",
		}
		if useQueue {
			name = "dbos-queue"
			notes = []string{fmt.Sprintf("DBOS Transact Go v1.8.0: workflows enqueued on a DBOS queue with WithWorkerConcurrency(%d), base polling interval %s, dequeued by this process; result by handle.GetResult, which polls the database for a queued workflow (every 1 s by default, -poll).", queueConcurrency, queuePoll)}
		}
		if poll > 0 {
			name += "-poll-" + poll.String()
		}
		open := func(ctx context.Context, dbURL string, conns int) (peerbench.Engine, error) {
			return newContext(ctx, dbURL, conns, useQueue, poll)
		}
		return peerbench.Peer{
			Name:  name,
			Notes: notes,
			// DBOS creates and migrates its schema on its first launch.
			Setup: func(ctx context.Context, dbURL string, conns int) error {
				e, err := open(ctx, dbURL, conns)
				if err != nil {
					return err
				}
				return e.Stop(ctx)
			},
			Open: open,
		}
	})
}

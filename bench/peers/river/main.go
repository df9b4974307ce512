// Command river measures River on durable-bench's W1 and W2 workloads, on
// this machine's PostgreSQL (DATABASE_URL).
//
//	cd bench/peers && go run ./river -n 2000
//
// River is a job queue, not a workflow engine: a workflow of k no-op steps
// is a chain of k jobs, each job's worker inserting the next job (x+1) and
// completing itself in one transaction (river.JobCompleteTx). River has no
// result API: a start's waiter is signalled from the client's in-process
// event subscription when the chain's last job completes, and reads the
// result from that job's recorded output. See ../README.md.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/durable-go/durable/bench/peers/internal/peerbench"
)

const (
	maxWorkers    = 32
	fetchCooldown = 5 * time.Millisecond
)

// StepArgs is one job of a chain: step Step of Steps of workflow Wf, on
// input X.
type StepArgs struct {
	Wf    int64 `json:"wf"`
	Step  int   `json:"step"`
	Steps int   `json:"steps"`
	X     int   `json:"x"`
}

// Kind is the job kind.
func (StepArgs) Kind() string { return "peerbench_step" }

// stepWorker works a StepArgs job: x -> x+1, then either inserts the next
// job of the chain and completes this one in the same transaction, or, on
// the last step, records x+1 as the job's output and returns (River's
// completer completes it). With -waiter worker, the last step instead
// completes itself in a transaction too and then signals the waiter.
type stepWorker struct {
	river.WorkerDefaults[StepArgs]
	e *engine
}

func (w *stepWorker) Work(ctx context.Context, job *river.Job[StepArgs]) error {
	a := job.Args
	x := a.X + 1
	last := a.Step >= a.Steps
	if last {
		if err := river.RecordOutput(ctx, x); err != nil {
			return err
		}
		if !w.e.direct {
			return nil
		}
	}
	tx, err := w.e.pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if !last {
		client := river.ClientFromContext[pgx.Tx](ctx)
		if _, err := client.InsertTx(ctx, tx, StepArgs{Wf: a.Wf, Step: a.Step + 1, Steps: a.Steps, X: x}, nil); err != nil {
			return err
		}
	}
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	if last {
		w.e.signal(a.Wf, outcome{x: x})
	}
	return nil
}

type outcome struct {
	x   int
	err error
}

type engine struct {
	direct bool // -waiter worker
	pool   *pgxpool.Pool
	client *river.Client[pgx.Tx]
	cancel func() // the subscription's
	done   chan struct{}

	next    atomic.Int64
	mu      sync.Mutex
	waiters map[int64]chan outcome
}

func openPool(ctx context.Context, dbURL string, conns int) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// migrate creates River's schema.
func migrate(ctx context.Context, dbURL string, conns int) error {
	pool, err := openPool(ctx, dbURL, conns)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := rivermigrate.New(riverpgxv5.New(pool), nil)
	if err != nil {
		return err
	}
	_, err = m.Migrate(ctx, rivermigrate.DirectionUp, nil)
	return err
}

// open starts a River client on a pool of conns connections, with a
// subscription that dispatches chain completions to their waiters.
func open(ctx context.Context, dbURL string, conns int, direct bool) (peerbench.Engine, error) {
	pool, err := openPool(ctx, dbURL, conns)
	if err != nil {
		return nil, err
	}
	e := &engine{direct: direct, pool: pool, done: make(chan struct{}), waiters: map[int64]chan outcome{}}
	workers := river.NewWorkers()
	river.AddWorker(workers, &stepWorker{e: e})
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{
		Queues: map[string]river.QueueConfig{
			river.QueueDefault: {MaxWorkers: maxWorkers},
		},
		FetchCooldown: fetchCooldown,
		Workers:       workers,
		Logger:        slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	// The channel is large enough for every event of a W1 run (three jobs
	// a workflow) even if the dispatcher fell behind: River drops events
	// that do not fit.
	events, cancel := client.SubscribeConfig(&river.SubscribeConfig{
		ChanSize: 1 << 16,
		Kinds:    []river.EventKind{river.EventKindJobCompleted, river.EventKindJobFailed, river.EventKindJobCancelled},
	})
	e.client, e.cancel = client, cancel
	go e.dispatch(events)
	if err := client.Start(ctx); err != nil {
		cancel()
		pool.Close()
		return nil, err
	}
	return e, nil
}

// dispatch hands each chain's last job's completion (or any job's failure)
// to the chain's waiter.
func (e *engine) dispatch(events <-chan *river.Event) {
	defer close(e.done)
	for ev := range events {
		var a StepArgs
		if err := json.Unmarshal(ev.Job.EncodedArgs, &a); err != nil {
			continue
		}
		var o outcome
		switch ev.Kind {
		case river.EventKindJobCompleted:
			if a.Step < a.Steps || e.direct {
				continue
			}
			x, err := strconv.Atoi(string(ev.Job.Output()))
			o = outcome{x: x, err: err}
		default:
			msg := string(ev.Kind)
			if n := len(ev.Job.Errors); n > 0 {
				msg += ": " + ev.Job.Errors[n-1].Error
			}
			o = outcome{err: fmt.Errorf("job %d (step %d of %d): %s", ev.Job.ID, a.Step, a.Steps, msg)}
		}
		e.signal(a.Wf, o)
	}
}

// signal hands o to workflow wf's waiter, if it still has one.
func (e *engine) signal(wf int64, o outcome) {
	e.mu.Lock()
	ch := e.waiters[wf]
	delete(e.waiters, wf)
	e.mu.Unlock()
	if ch != nil {
		ch <- o
	}
}

func (e *engine) Start(ctx context.Context, steps, x int) (func(context.Context) (int, error), error) {
	wf := e.next.Add(1)
	ch := make(chan outcome, 1)
	e.mu.Lock()
	e.waiters[wf] = ch
	e.mu.Unlock()
	if _, err := e.client.Insert(ctx, StepArgs{Wf: wf, Step: 1, Steps: steps, X: x}, nil); err != nil {
		e.mu.Lock()
		delete(e.waiters, wf)
		e.mu.Unlock()
		return nil, err
	}
	return func(ctx context.Context) (int, error) {
		select {
		case o := <-ch:
			return o.x, o.err
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}, nil
}

func (e *engine) Stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err := e.client.Stop(ctx)
	e.cancel()
	<-e.done
	e.pool.Close()
	if err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

func main() {
	var waiter string
	peerbench.Main(func(fs *flag.FlagSet) {
		fs.StringVar(&waiter, "waiter", "subscribe", "how a start's waiter learns its chain is done: subscribe (the client's job_completed event for the chain's last job, which River's batch completer emits) or worker (the last job completes itself with JobCompleteTx and its worker signals the waiter after the commit: a lower bound, not a River API)")
	}, func() peerbench.Peer {
		name := "river"
		notes := []string{
			fmt.Sprintf("River v0.51.2 (pgx v5 driver): queue %q with MaxWorkers %d, FetchCooldown %s, FetchPollInterval default (1 s), pool of -conns connections.", river.QueueDefault, maxWorkers, fetchCooldown),
			"A k-step workflow is a chain of k jobs; each job's worker inserts the next job (x+1) and completes itself in one transaction (InsertTx + JobCompleteTx).",
		}
		switch waiter {
		case "subscribe":
			notes = append(notes, "River has no result API: a waiter is signalled by the client's in-process event subscription (SubscribeConfig, job_completed) when the chain's last job completes; the last job records x+1 as its output and returns nil, and River's batch completer completes it (and emits the event) when 100 completions are pending or on its 250 ms tick.")
		case "worker":
			name = "river-worker-signal"
			notes = append(notes, "-waiter worker: the last job records x+1 as its output, completes itself with JobCompleteTx in its own transaction, and its worker signals the waiter after the commit (not a River API: a lower bound on River's start-to-result time).")
		default:
			fmt.Fprintf(os.Stderr, "-waiter: want subscribe or worker, not %q\n", waiter)
			os.Exit(2)
		}
		return peerbench.Peer{
			Name:  name,
			Notes: notes,
			Setup: migrate,
			Open: func(ctx context.Context, dbURL string, conns int) (peerbench.Engine, error) {
				return open(ctx, dbURL, conns, waiter == "worker")
			},
		}
	})
}

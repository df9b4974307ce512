package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// Order is the input of the PlaceOrder workflow.
type Order struct {
	ID       string
	SKU      string
	Quantity int
	Cents    int64
}

// Reserve, Charge and Ship are the workflow's activities: ordinary functions
// that may do I/O. Each gets an idempotency key (activity.GetInfo) to pass to
// the services it calls, since an activity runs at least once.
func Reserve(_ context.Context, o Order) (string, error) {
	return fmt.Sprintf("%d × %s", o.Quantity, o.SKU), nil
}

func Charge(_ context.Context, o Order) (int64, error) { return o.Cents, nil }

func Ship(_ context.Context, orderID string) (string, error) { return "T-" + orderID, nil }

// PlaceOrder runs the three activities in turn. It is deterministic: it
// touches the world only through activities.
func PlaceOrder(ctx workflow.Context, o Order) (string, error) {
	reserved, err := workflow.ExecuteActivity(ctx, Reserve, o).Get(ctx)
	if err != nil {
		return "", err
	}
	charged, err := workflow.ExecuteActivity(ctx, Charge, o).Get(ctx)
	if err != nil {
		return "", err
	}
	tracking, err := workflow.ExecuteActivity(ctx, Ship, o.ID).Get(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("order %s: reserved %s, charged %d cents, shipped as %s", o.ID, reserved, charged, tracking), nil
}

// newOrderEngine returns an engine with PlaceOrder and its activities
// registered.
func newOrderEngine(pool *pgxpool.Pool) *engine.Engine {
	eng, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	err = errors.Join(
		engine.RegisterWorkflow(eng, PlaceOrder, engine.WorkflowOptions{}),
		engine.RegisterActivity(eng, Reserve, activity.Options{}),
		engine.RegisterActivity(eng, Charge, activity.Options{Retry: activity.RetryPolicy{MaximumAttempts: 5}}),
		engine.RegisterActivity(eng, Ship, activity.Options{}),
	)
	if err != nil {
		panic(err)
	}
	return eng
}

// runEngine runs eng in the background; stop cancels Run and waits for it to
// return.
func runEngine(eng *engine.Engine) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			panic(err)
		}
	}
}

// This example registers a workflow of three activities, runs the engine,
// starts the workflow and waits for its result.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, cleanup := pgtest.ExamplePool() // a program: pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	defer cleanup()

	// New migrates the schema; the zero Options work.
	eng, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	// Register under stable names (here the functions' names): history
	// records names, not function pointers.
	if err := errors.Join(
		engine.RegisterWorkflow(eng, PlaceOrder, engine.WorkflowOptions{}),
		engine.RegisterActivity(eng, Reserve, activity.Options{}),
		engine.RegisterActivity(eng, Charge, activity.Options{Retry: activity.RetryPolicy{MaximumAttempts: 5}}),
		engine.RegisterActivity(eng, Ship, activity.Options{}),
	); err != nil {
		panic(err)
	}

	// Run the workers until the context is canceled; wait for Run to return.
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() { stop(); <-done }()

	run, err := engine.Start(ctx, eng, PlaceOrder, Order{ID: "42", SKU: "widget", Quantity: 2, Cents: 1998},
		engine.StartOptions{ID: "order-42"})
	if err != nil {
		panic(err)
	}
	res, err := run.Result(ctx) // a string, as PlaceOrder returns
	if err != nil {
		panic(err)
	}
	fmt.Println(res)
	// Output:
	// order 42: reserved 2 × widget, charged 1998 cents, shipped as T-42
}

// Start is idempotent by workflow ID: while a run with the ID is open,
// starting again returns that run. Start only records the run; a worker of
// any engine on the database runs it.
func ExampleStart() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	eng := newOrderEngine(pool)

	o := Order{ID: "7", SKU: "gadget", Quantity: 1, Cents: 500}
	first, err := engine.Start(ctx, eng, PlaceOrder, o, engine.StartOptions{ID: "order-7"})
	if err != nil {
		panic(err)
	}
	again, err := engine.Start(ctx, eng, PlaceOrder, o, engine.StartOptions{ID: "order-7"})
	if err != nil {
		panic(err)
	}
	fmt.Println("same run:", again.RunID == first.RunID, "existing:", first.Existing, again.Existing)

	_, err = engine.Start(ctx, eng, PlaceOrder, o, engine.StartOptions{ID: "order-7", RejectIfRunning: true})
	fmt.Println("rejected:", errors.Is(err, engine.ErrAlreadyRunning))

	stop := runEngine(eng)
	defer stop()
	res, err := first.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res)
	// Output:
	// same run: true existing: false true
	// rejected: true
	// order 7: reserved 1 × gadget, charged 500 cents, shipped as T-7
}

// StartTx starts a workflow inside the caller's transaction: the order row
// and the run are committed together, or neither is. No message is sent
// for an order that was rolled back.
func ExampleStartTx() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	eng := newOrderEngine(pool)
	stop := runEngine(eng)
	defer stop()
	if _, err := pool.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, sku text NOT NULL)`); err != nil {
		panic(err)
	}

	placeOrder := func(o Order, commit bool) (*engine.Run[string], error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return nil, err
		}
		defer tx.Rollback(ctx) //nolint:errcheck // a no-op after Commit
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, sku) VALUES ($1, $2)`, o.ID, o.SKU); err != nil {
			return nil, err
		}
		run, err := engine.StartTx(ctx, eng, tx, PlaceOrder, o, engine.StartOptions{ID: "order-" + o.ID})
		if err != nil || !commit {
			return run, err
		}
		return run, tx.Commit(ctx)
	}

	if _, err := placeOrder(Order{ID: "1", SKU: "widget", Quantity: 1, Cents: 999}, false); err != nil {
		panic(err)
	}
	_, err := engine.GetRun[string](ctx, eng, "order-1")
	fmt.Println("rolled back, run exists:", !errors.Is(err, engine.ErrRunNotFound))

	run, err := placeOrder(Order{ID: "2", SKU: "gizmo", Quantity: 3, Cents: 2997}, true)
	if err != nil {
		panic(err)
	}
	res, err := run.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(res)
	// Output:
	// rolled back, run exists: false
	// order 2: reserved 3 × gizmo, charged 2997 cents, shipped as T-2
}

// A run's history is its list of events: the commands the workflow gave
// and what came of them. A worker that lost the run from memory rebuilds it
// by replaying the workflow against this list.
func ExampleRun_History() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	eng := newOrderEngine(pool)
	stop := runEngine(eng)
	defer stop()

	run, err := engine.Start(ctx, eng, PlaceOrder, Order{ID: "9", SKU: "widget", Quantity: 1, Cents: 999}, engine.StartOptions{})
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	events, err := run.History(ctx)
	if err != nil {
		panic(err)
	}
	for _, ev := range events {
		fmt.Println(ev.ID, ev.Type())
	}
	info, err := run.Describe(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println(info.Status, info.LastEventID)
	// Output:
	// 1 workflow_started
	// 2 activity_scheduled
	// 3 activity_completed
	// 4 activity_scheduled
	// 5 activity_completed
	// 6 activity_scheduled
	// 7 activity_completed
	// 8 workflow_completed
	// completed 8
}

// PlaceOrderShippingFirst is a change to PlaceOrder that ships before it
// charges: fine for new orders, but not for the runs already in flight.
func PlaceOrderShippingFirst(ctx workflow.Context, o Order) (string, error) {
	reserved, err := workflow.ExecuteActivity(ctx, Reserve, o).Get(ctx)
	if err != nil {
		return "", err
	}
	tracking, err := workflow.ExecuteActivity(ctx, Ship, o.ID).Get(ctx)
	if err != nil {
		return "", err
	}
	charged, err := workflow.ExecuteActivity(ctx, Charge, o).Get(ctx)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("order %s: reserved %s, charged %d cents, shipped as %s", o.ID, reserved, charged, tracking), nil
}

// A Replayer checks workflow code against recorded histories, with no
// database: the test to run before deploying changed workflow code. The
// history here comes from a run on the database, exported as `durable
// workflow history ID --json --payloads` writes it; a test would read such
// files from testdata.
func ExampleReplayer() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, cleanup := pgtest.ExamplePool()
	defer cleanup()
	eng := newOrderEngine(pool)
	stop := runEngine(eng)
	defer stop()
	run, err := engine.Start(ctx, eng, PlaceOrder, Order{ID: "5", SKU: "widget", Quantity: 1, Cents: 999}, engine.StartOptions{ID: "order-5"})
	if err != nil {
		panic(err)
	}
	if _, err := run.Result(ctx); err != nil {
		panic(err)
	}
	recorded, err := eng.ExportHistory(ctx, "order-5")
	if err != nil {
		panic(err)
	}
	var file bytes.Buffer
	if err := history.Export(&file, recorded); err != nil {
		panic(err)
	}

	// The test: import the file, register the code under the names the
	// engines recorded, replay.
	h, err := history.Import(&file)
	if err != nil {
		panic(err)
	}
	replay := func(wf func(workflow.Context, Order) (string, error)) error {
		rp, err := engine.NewReplayer(engine.ReplayerOptions{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			return err
		}
		if err := engine.RegisterWorkflow(rp, wf, engine.WorkflowOptions{Name: "PlaceOrder"}); err != nil {
			return err
		}
		return rp.Replay(ctx, h)
	}
	fmt.Println("PlaceOrder replays:", replay(PlaceOrder) == nil)
	var nd *workflow.NonDeterminismError
	if errors.As(replay(PlaceOrderShippingFirst), &nd) {
		fmt.Printf("PlaceOrderShippingFirst diverges at event %d: history has %s, code did %s\n", nd.EventID, nd.Recorded, nd.Got)
	}
	// Output:
	// PlaceOrder replays: true
	// PlaceOrderShippingFirst diverges at event 4: history has ActivityScheduled(Charge, seq 2), code did ActivityScheduled(Ship, seq 2)
}

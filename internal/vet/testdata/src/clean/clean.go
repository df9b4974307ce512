// Package clean holds a workflow that uses only the workflow API, and
// activities and plain functions that may do anything.
package clean

import (
	"context"
	"math/rand"
	"os"
	"slices"
	"time"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
	"github.com/google/uuid"
)

// Order is a workflow that keeps the contract.
func Order(ctx workflow.Context, items map[string]int) (string, error) {
	started := workflow.Now(ctx)
	id := workflow.SideEffect(ctx, func() string { return uuid.NewString() })
	jitter := workflow.SideEffect(ctx, func() int { return rand.Intn(100) })

	var futures []workflow.Future[int]
	for _, k := range slices.Sorted(keys(items)) {
		futures = append(futures, workflow.ExecuteActivity(ctx, Reserve, k))
	}
	// An activity written in place is an activity all the same.
	_ = workflow.ExecuteActivity(ctx, func(ctx context.Context, in string) (int64, error) {
		return time.Now().Unix(), nil
	}, id)

	stamp := func(ctx context.Context, in string) (int64, error) {
		return time.Now().Unix(), nil
	}
	_ = workflow.ExecuteActivity(ctx, stamp, id)

	ch := workflow.NewChannel[int](ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for _, f := range futures {
			n, _ := f.Get(ctx)
			ch.Send(ctx, n)
		}
	})
	total := 0
	for range futures {
		n, _ := ch.Receive(ctx)
		total += n
	}

	timer := workflow.NewTimer(ctx, time.Hour+time.Duration(jitter)*time.Second)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(timer, func() {}).AddReceive(ch, func() {})
	sel.Select(ctx)
	workflow.Await(ctx, func() bool { return total > 0 })
	if err := workflow.Sleep(ctx, time.Minute); err != nil {
		return "", err
	}
	run(ctx, Reserve)
	workflow.Logger(ctx).Info("ordered", "took", workflow.Now(ctx).Sub(started))
	return id, nil
}

// keys is called from the workflow and is deterministic: it returns the
// keys unsorted, and the caller sorts them.
func keys(m map[string]int) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		ks := make([]string, 0, len(m))
		//durable:nondeterministic-ok the keys are sorted by the caller
		for k := range m {
			ks = append(ks, k)
		}
		for _, k := range ks {
			if !yield(k) {
				return
			}
		}
	}
}

// run wraps ExecuteActivity; the activity it is given is not followed.
func run(ctx workflow.Context, fn func(context.Context, string) (int, error)) {
	_, _ = workflow.ExecuteActivity(ctx, fn, "x").Get(ctx)
}

// Reserve is an activity: it may read the clock and the environment.
func Reserve(ctx context.Context, sku string) (int, error) {
	if os.Getenv("DRY_RUN") != "" {
		return 0, nil
	}
	time.Sleep(time.Millisecond)
	return int(time.Now().Unix()) + rand.Intn(3), nil
}

// Main is not workflow code: goroutines, select and the clock are fine.
func Main(e *engine.Engine) error {
	done := make(chan error, 1)
	go func() { done <- engine.RegisterWorkflow(e, Order, engine.WorkflowOptions{}) }()
	select {
	case err := <-done:
		if err != nil {
			return err
		}
	case <-time.After(time.Second):
	}
	_ = engine.RegisterActivity(e, Reserve, engine.ActivityOptions{})
	_, err := os.ReadFile("orders.json")
	return err
}

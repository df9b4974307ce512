package saga_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/saga"
	"github.com/durable-go/durable/workflow"
)

// The steps of an order, and their compensations.

func Reserve(_ context.Context, sku string) (string, error) {
	fmt.Println("reserve", sku)
	return "res-1", nil
}

func Release(_ context.Context, reservation string) (struct{}, error) {
	fmt.Println("release", reservation)
	return struct{}{}, nil
}

func Charge(_ context.Context, cents int) (string, error) {
	fmt.Println("charge", cents)
	return "pay-1", nil
}

func Refund(_ context.Context, payment string) (struct{}, error) {
	fmt.Println("refund", payment)
	return struct{}{}, nil
}

func Ship(_ context.Context, sku string) (string, error) {
	fmt.Println("ship", sku, "(refused)")
	return "", activity.Permanent(errors.New("no carrier serves the address"))
}

// Order reserves, charges and ships; when a step fails, it undoes the steps
// that succeeded, most recent first.
func Order(ctx workflow.Context, sku string) (string, error) {
	s := saga.New(saga.Options{})
	res, err := workflow.ExecuteActivity(ctx, Reserve, sku).Get(ctx)
	if err != nil {
		return "", s.Fail(ctx, err)
	}
	saga.AddCompensation(s, Release, res)
	pay, err := workflow.ExecuteActivity(ctx, Charge, 4900).Get(ctx)
	if err != nil {
		return "", s.Fail(ctx, err)
	}
	saga.AddCompensation(s, Refund, pay)
	tracking, err := workflow.ExecuteActivity(ctx, Ship, sku).Get(ctx)
	if err != nil {
		return "", s.Fail(ctx, err)
	}
	return tracking, nil
}

func ExampleSaga_Fail() {
	pool, drop := pgtest.ExamplePool()
	defer drop()
	eng, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		panic(err)
	}
	err = errors.Join(
		engine.RegisterWorkflow(eng, Order, engine.WorkflowOptions{}),
		engine.RegisterActivity(eng, Reserve, activity.Options{}),
		engine.RegisterActivity(eng, Release, activity.Options{}),
		engine.RegisterActivity(eng, Charge, activity.Options{}),
		engine.RegisterActivity(eng, Refund, activity.Options{}),
		engine.RegisterActivity(eng, Ship, activity.Options{}),
	)
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- eng.Run(runCtx) }()
	defer func() {
		stop()
		<-done
	}()

	run, err := engine.Start(ctx, eng, Order, "BOOK-42", engine.StartOptions{ID: "order-1"})
	if err != nil {
		panic(err)
	}
	_, err = run.Result(ctx)
	if wfErr, ok := errors.AsType[*engine.WorkflowError](err); ok {
		fmt.Println("the order failed:", wfErr.Failure.Message)
	}
	// Output:
	// reserve BOOK-42
	// charge 4900
	// ship BOOK-42 (refused)
	// refund pay-1
	// release res-1
	// the order failed: activity Ship failed after 1 attempt(s) (permanent): no carrier serves the address; compensated
}

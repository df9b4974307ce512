// Command ordersaga places an order as a saga: reserve the inventory, charge
// the payment, ship. When shipping fails for good, the
// payment is refunded and the inventory released, in that order.
//
//	go run ./examples/ordersaga                    # ships
//	go run ./examples/ordersaga -fail-ship         # compensates
//	go run ./examples/ordersaga -order B-7 -crash-after 1; echo $?   # 3: died while compensating
//	go run ./examples/ordersaga -order B-7         # finishes compensating, once
//
// -crash-after N makes the process exit with status 3 right after the Nth
// compensation was recorded (it implies -fail-ship). Run the same -order
// again: the run resumes, the compensations that completed are not run
// again, and the step the crashed process had claimed runs once its lease
// (3s) has run out.
//
// Its database is -db, else $DATABASE_URL, else the development SQLite file
// (engine.DevDatabase).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"github.com/durable-go/durable/durablecli"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/ordersaga/checkout"
	"github.com/durable-go/durable/history"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// `ordersaga replay trace ID` and `ordersaga replay check`.
	if len(os.Args) > 1 && os.Args[1] == "replay" {
		register := func(r engine.Registrar) error { return checkout.Register(r, &checkout.Activities{Out: io.Discard}) }
		os.Exit(durablecli.Run(ctx, os.Args[2:], os.Stdout, os.Stderr, register))
	}
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ordersaga:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("ordersaga", flag.ContinueOnError)
	fs.SetOutput(out)
	db := fs.String("db", engine.DefaultDSN(), "database: a postgres:// URL, or a SQLite file path (default $DATABASE_URL, else "+engine.DevDatabase()+")")
	id := fs.String("order", "A-1001", "the order's ID; it names the workflow, so running again with it resumes that order")
	failShip := fs.Bool("fail-ship", false, "ship to a country the carrier does not serve: shipping fails for good and the order is compensated")
	crashAfter := fs.Int("crash-after", 0, "exit with status 3 right after the Nth compensation completed (implies -fail-ship)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *crashAfter < 0 || *crashAfter > 2 {
		return fmt.Errorf("-crash-after %d: want 1 or 2, the number of compensations to complete before the crash", *crashAfter)
	}

	eng, err := engine.Open(ctx, *db, engine.Options{
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	if err != nil {
		return err
	}
	defer eng.Close()
	if err := checkout.Register(eng, &checkout.Activities{Out: out, CrashAfter: *crashAfter}); err != nil {
		return err
	}
	runCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engineDone := make(chan error, 1)
	go func() { engineDone <- eng.Run(runCtx) }()
	defer func() {
		stopEngine()
		<-engineDone
	}()

	order := checkout.Order{ID: *id, SKU: "BOOK-42", Qty: 2, Cents: 4900, Card: "card_4242", Country: "NL"}
	if *failShip || *crashAfter > 0 {
		order.Country = checkout.NoServiceCountry
	}
	r, err := engine.Start(ctx, eng, checkout.PlaceOrder, order, engine.StartOptions{ID: "order:" + *id})
	if err != nil {
		return err
	}
	if r.Existing {
		fmt.Fprintf(out, "resuming workflow %s (run %s): steps that completed are not run again\n", r.WorkflowID, r.RunID)
	} else {
		fmt.Fprintf(out, "started workflow %s (run %s)\n", r.WorkflowID, r.RunID)
	}

	receipt, err := r.Result(ctx)
	var failed *engine.WorkflowError
	switch {
	case errors.Is(err, context.Canceled):
		fmt.Fprintf(out, "stopped; run again with -order %s to resume\n", *id)
		return nil
	case errors.As(err, &failed):
	case err != nil:
		return err
	}
	events, err := r.History(context.WithoutCancel(ctx))
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "history of %s:\n", r.WorkflowID)
	printTrail(out, events)
	if failed != nil {
		fmt.Fprintf(out, "order %s failed: %s\n", *id, failed.Failure.Message)
		return printDeadLetter(ctx, out, eng, r.RunID)
	}
	fmt.Fprintf(out, "order %s shipped: reservation %s, payment %s, tracking %s\n", *id, receipt.Reservation, receipt.Payment, receipt.Tracking)
	return nil
}

// compensations are the activities that undo a step.
var compensations = map[string]bool{"ReleaseInventory": true, "RefundPayment": true}

// printTrail prints each activity of a run's history and how it ended, the
// compensation trail included.
func printTrail(out io.Writer, events []history.Event) {
	names := map[int64]string{}
	for _, ev := range events {
		var name, outcome string
		switch a := ev.Attributes.(type) {
		case history.ActivityScheduled:
			names[a.Seq] = a.Activity
			continue
		case history.ActivityCompleted:
			name, outcome = names[a.Seq], fmt.Sprintf("completed (attempt %d)", a.Attempt)
		case history.ActivityFailed:
			name, outcome = names[a.Seq], fmt.Sprintf("failed for good (%s): %s", a.Failure.Class, a.Failure.Message)
		default:
			continue
		}
		if compensations[name] {
			outcome += "  <- compensation"
		}
		fmt.Fprintf(out, "  %3d  %-16s %s\n", ev.ID, name, outcome)
	}
}

// printDeadLetter names the dead letter that keeps the failed run.
func printDeadLetter(ctx context.Context, out io.Writer, eng *engine.Engine, runID string) error {
	ds, err := eng.DeadLetters(ctx, engine.DeadLetterFilter{Kind: engine.DeadWorkflow, Type: "PlaceOrder", Pending: true})
	if err != nil {
		return err
	}
	for _, d := range ds {
		if d.RunID == runID {
			fmt.Fprintf(out, "the failed run is kept as dead letter %d: durable dlq show %d\n", d.ID, d.ID)
		}
	}
	return nil
}

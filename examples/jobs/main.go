// Command jobs runs a small shop's background jobs on PostgreSQL with
// durable's standalone jobs, one practice at a time, and prints what happens:
//
//  1. an order and its jobs in one transaction (engine.EnqueueTx), and an
//     order whose transaction rolls back, leaving no job behind;
//  2. an idempotent consumer (INSERT ... ON CONFLICT DO NOTHING) delivered twice;
//  3. a consumer made exactly-once with engine.ExactlyOnce, delivered twice;
//  4. a permanent failure in the dead-letter table, redriven after the fix;
//  5. a backfill on the "batch" queue that does not delay a password reset
//     on the "critical" queue.
//
// Run it with
//
//	go run ./examples/jobs
//
// It creates its shop_* tables next to durable's, and can be run again. It
// needs PostgreSQL (-db, else $DATABASE_URL): the shop's orders and their
// jobs share the shop's own pgx transactions.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/jobs/shop"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "jobs:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("jobs", flag.ContinueOnError)
	fs.SetOutput(out)
	db := fs.String("db", engine.DefaultDSN(), "PostgreSQL URL (default $DATABASE_URL)")
	rows := fs.Int("backfill", 20, "how many rows the backfill has")
	rowDelay := fs.Duration("row-delay", 100*time.Millisecond, "how long the backfill works on a row")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *rows < 1 {
		return fmt.Errorf("-backfill %d: want at least 1 row", *rows)
	}

	if !strings.HasPrefix(*db, "postgres://") && !strings.HasPrefix(*db, "postgresql://") {
		return fmt.Errorf("this example needs PostgreSQL: the shop enqueues its jobs in its own pgx transactions (engine.EnqueueTx, engine.ExactlyOnce); set DATABASE_URL or -db to a postgres:// URL (got %q)", *db)
	}
	pool, err := pgxpool.New(ctx, *db)
	if err != nil {
		return err
	}
	defer pool.Close()
	eng, err := engine.New(pool, engine.Options{
		Queues:       shop.Queues,
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	if err != nil {
		return err
	}
	if err := shop.Migrate(ctx, pool); err != nil {
		return err
	}
	h := &shop.Handlers{Pool: pool, Out: out, RowDelay: *rowDelay}
	if err := shop.Register(eng, h); err != nil {
		return err
	}
	runCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engineDone := make(chan error, 1)
	go func() { engineDone <- eng.Run(runCtx) }()
	defer func() {
		stopEngine()
		<-engineDone
	}()

	d := &demo{out: out, pool: pool, eng: eng, h: h, rows: *rows, rowDelay: *rowDelay}
	for _, step := range []func(context.Context) error{d.outbox, d.idempotent, d.exactlyOnce, d.deadLetter, d.queues} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

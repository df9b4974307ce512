package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/jobs/shop"
)

// demo walks through the practices, one step at a time, on one order.
type demo struct {
	out      io.Writer
	pool     *pgxpool.Pool
	eng      *engine.Engine
	h        *shop.Handlers
	rows     int
	rowDelay time.Duration

	order int64 // the order the steps work on
}

const (
	sku   = "BOOK-42"
	clock = "15:04:05.000"
)

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.out, "   "+format+"\n", args...)
}

// outbox places an order whose jobs are enqueued in its transaction, then
// one whose transaction rolls back.
func (d *demo) outbox(ctx context.Context) error {
	fmt.Fprintln(d.out, "1. An order and its jobs in one transaction (engine.EnqueueTx)")
	if err := shop.Restock(ctx, d.pool, sku, 1); err != nil {
		return err
	}
	id, err := shop.PlaceOrder(ctx, d.pool, d.eng, sku, 4900)
	if err != nil {
		return err
	}
	d.order = id
	d.say("order %d placed; its jobs %s and %s were enqueued in the order's transaction", id, shop.ReceiptKey(id), shop.ChargeKey(id))
	if err := d.waitJobs(ctx, shop.ReceiptKey(id), shop.ChargeKey(id)); err != nil {
		return err
	}

	lost, err := shop.PlaceOrder(ctx, d.pool, d.eng, sku, 4900)
	if !errors.Is(err, shop.ErrOutOfStock) {
		return fmt.Errorf("the second order: want %v, got %w", shop.ErrOutOfStock, err)
	}
	d.say("a second order of %s (order %d) finds it out of stock, so its transaction rolls back", sku, lost)
	var orders, jobs int
	if err := d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_orders WHERE id = $1),
		(SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key IN ($2, $3))`,
		lost, shop.ReceiptKey(lost), shop.ChargeKey(lost)).Scan(&orders, &jobs); err != nil {
		return err
	}
	d.say("-> order %d does not exist (%d rows), and neither do its jobs (%d with keys %s, %s): no receipt for an order never placed",
		lost, orders, jobs, shop.ReceiptKey(lost), shop.ChargeKey(lost))
	return nil
}

// idempotent delivers the receipt job a second time.
func (d *demo) idempotent(ctx context.Context) error {
	fmt.Fprintln(d.out, "2. An idempotent consumer (INSERT ... ON CONFLICT DO NOTHING), delivered twice")
	var h *shop.Handlers
	key := shop.ReceiptKey(d.order)
	if _, err := engine.Enqueue(ctx, d.eng, h.SendReceipt, d.order, engine.JobOptions{Key: key}); err != nil {
		return err
	}
	d.say("the receipt job (key %s) is delivered again, as a queue does after a crash between work and ack", key)
	if err := d.waitJobs(ctx, key); err != nil {
		return err
	}
	var n int
	if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM shop_receipts WHERE order_id = $1`, d.order).Scan(&n); err != nil {
		return err
	}
	d.say("-> order %d has %d receipt", d.order, n)
	return nil
}

// exactlyOnce delivers the charge job a second time.
func (d *demo) exactlyOnce(ctx context.Context) error {
	fmt.Fprintln(d.out, "3. Exactly once in your own database (engine.ExactlyOnce), delivered twice")
	var h *shop.Handlers
	key := shop.ChargeKey(d.order)
	if _, err := engine.Enqueue(ctx, d.eng, h.ChargeOrder, d.order, engine.JobOptions{Key: key}); err != nil {
		return err
	}
	d.say("the charge job (key %s) is delivered again", key)
	if err := d.waitJobs(ctx, key); err != nil {
		return err
	}
	var payments int
	var status string
	if err := d.pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM shop_payments WHERE order_id = $1), status FROM shop_orders WHERE id = $1`,
		d.order).Scan(&payments, &status); err != nil {
		return err
	}
	d.say("-> order %d has %d payment and is %s", d.order, payments, status)
	return nil
}

// deadLetter runs a job that fails for good, shows its dead letter, ships
// the fix and redrives it.
func (d *demo) deadLetter(ctx context.Context) error {
	fmt.Fprintln(d.out, "4. A permanent failure lands in the dead-letter table; redrive it after the fix")
	var h *shop.Handlers
	key := fmt.Sprintf("invoice:%d", d.order)
	if _, err := engine.Enqueue(ctx, d.eng, h.ExportInvoice, d.order, engine.JobOptions{Key: key}); err != nil {
		return err
	}
	var dl engine.DeadLetter
	err := waitFor(ctx, "the dead letter of "+key, func(ctx context.Context) (bool, error) {
		ds, err := d.eng.DeadLetters(ctx, engine.DeadLetterFilter{Kind: engine.DeadJob, Type: "ExportInvoice", Pending: true})
		for _, x := range ds {
			if x.IdempotencyKey == key {
				dl = x
				return true, nil
			}
		}
		return false, err
	})
	if err != nil {
		return err
	}
	d.say("dead letter %d (eng.DeadLetters, or: durable dlq list):", dl.ID)
	d.say("  kind %s, type %s, queue %s, key %s, payload %s", dl.Kind, dl.Type, dl.Queue, dl.IdempotencyKey, dl.Payload)
	d.say("  %d attempt(s), error class %s, last error %q", dl.Attempts, dl.ErrorClass, dl.LastError)
	d.say("  first failed at %s, dead-lettered at %s", dl.FirstFailedAt.Format(clock), dl.DeadLetteredAt.Format(clock))

	d.h.InvoicesFixed.Store(true)
	d.say("the fix ships; redrive it with eng.Redrive(ctx, %d) (or: durable dlq redrive %d)", dl.ID, dl.ID)
	if _, err := d.eng.Redrive(ctx, dl.ID); err != nil {
		return err
	}
	err = waitFor(ctx, "the invoice of order "+fmt.Sprint(d.order), func(ctx context.Context) (bool, error) {
		var ok bool
		err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM shop_invoices WHERE order_id = $1)`, d.order).Scan(&ok)
		return ok, err
	})
	if err != nil {
		return err
	}
	dl, err = d.eng.DeadLetter(ctx, dl.ID)
	if err != nil {
		return err
	}
	again, err := d.eng.Redrive(ctx, dl.ID)
	if err != nil {
		return err
	}
	d.say("-> the invoice of order %d is exported; dead letter %d was redriven at %s; redriving it again does nothing (redriven: %v)",
		d.order, dl.ID, dl.RedrivenAt.Format(clock), again.Redriven)
	return nil
}

// queues starts a backfill on the batch queue, then a password reset on the
// critical queue, and shows that the reset did not wait for the backfill.
func (d *demo) queues(ctx context.Context) error {
	fmt.Fprintf(d.out, "5. Separate queues: a backfill on %q does not delay a password reset on %q\n", shop.Batch, shop.Critical)
	var h *shop.Handlers
	batch := fmt.Sprintf("order-%d", d.order)
	started := time.Now()
	for i := 1; i <= d.rows; i++ {
		row := shop.Row{Batch: batch, No: i}
		if _, err := engine.Enqueue(ctx, d.eng, h.BackfillRow, row, engine.JobOptions{Key: fmt.Sprintf("backfill:%s:%d", batch, i)}); err != nil {
			return err
		}
	}
	d.say("enqueued a backfill of %d rows on %q, which runs one job at a time (%s a row)", d.rows, shop.Batch, d.rowDelay)

	key := fmt.Sprintf("password-reset:%d", d.order)
	enqueued := time.Now()
	if _, err := engine.Enqueue(ctx, d.eng, h.SendPasswordReset, "ada@example.com", engine.JobOptions{Key: key}); err != nil {
		return err
	}
	var done int
	err := waitFor(ctx, "the password reset", func(ctx context.Context) (bool, error) {
		var sent bool
		err := d.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM shop_emails WHERE idempotency_key = $1),
			(SELECT count(*) FROM shop_backfill WHERE batch = $2)`, key, batch).Scan(&sent, &done)
		return sent, err
	})
	if err != nil {
		return err
	}
	d.say("-> the password reset was sent %s after it was enqueued, with %d of %d backfill rows still waiting",
		time.Since(enqueued).Round(time.Millisecond), d.rows-done, d.rows)

	err = waitFor(ctx, "the backfill", func(ctx context.Context) (bool, error) {
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM shop_backfill WHERE batch = $1`, batch).Scan(&done)
		return done == d.rows, err
	})
	if err != nil {
		return err
	}
	d.say("-> the backfill finished %d rows in %s", done, time.Since(started).Round(10*time.Millisecond))
	return nil
}

// waitJobs waits until the jobs with these keys have finished: their tasks
// are gone once they completed or were dead-lettered.
func (d *demo) waitJobs(ctx context.Context, keys ...string) error {
	return waitFor(ctx, fmt.Sprintf("jobs %v", keys), func(ctx context.Context) (bool, error) {
		var n int
		err := d.pool.QueryRow(ctx, `SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key = ANY($1)`, keys).Scan(&n)
		return n == 0, err
	})
}

// waitFor polls cond until it holds, for at most 30 seconds.
func waitFor(ctx context.Context, what string, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		ok, err := cond(ctx)
		if err == nil && ok {
			return nil
		}
		if err != nil && ctx.Err() == nil {
			return fmt.Errorf("wait for %s: %w", what, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for %s: %w", what, ctx.Err())
		case <-tick.C:
		}
	}
}

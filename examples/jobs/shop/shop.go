// Package shop is a small web shop's background jobs, run as standalone
// durable jobs (engine.Enqueue) on PostgreSQL, following the
// background-jobs practices: enqueue the job in the transaction that makes
// it necessary, enqueue references rather than state, make every job
// idempotent, fail for good at once when no retry can help, keep what failed
// in the dead-letter table until the fix ships, and keep a backfill off the
// queue that user-facing jobs use.
package shop

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
)

// The two queues: user-facing jobs on one, batch work on the other, so a
// backfill never delays a password reset.
const (
	Critical = "critical"
	Batch    = "batch"
)

// Queues are the engine's queues for these jobs: the critical queue runs
// several jobs at once; the batch queue one at a time, so a backfill goes
// at its own pace.
var Queues = map[string]engine.QueueOptions{
	Critical: {ActivityConcurrency: 4},
	Batch:    {ActivityConcurrency: 1},
}

// schema is the shop's own tables.
const schema = `
CREATE TABLE IF NOT EXISTS shop_stock (
    sku     text PRIMARY KEY,
    on_hand integer NOT NULL CHECK (on_hand >= 0)
);
CREATE TABLE IF NOT EXISTS shop_orders (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sku        text        NOT NULL,
    cents      bigint      NOT NULL,
    status     text        NOT NULL DEFAULT 'new' CHECK (status IN ('new', 'paid')),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS shop_receipts (
    order_id bigint      PRIMARY KEY REFERENCES shop_orders,
    sent_at  timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_payments (
    id         bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    order_id   bigint      NOT NULL REFERENCES shop_orders,
    cents      bigint      NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_invoices (
    order_id    bigint      PRIMARY KEY REFERENCES shop_orders,
    exported_at timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_emails (
    idempotency_key text        PRIMARY KEY,
    address         text        NOT NULL,
    sent_at         timestamptz NOT NULL
);
CREATE TABLE IF NOT EXISTS shop_backfill (
    batch  text        NOT NULL,
    row_no integer     NOT NULL,
    done_at timestamptz NOT NULL,
    PRIMARY KEY (batch, row_no)
);`

// Migrate creates the shop's tables if they do not exist.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := pool.Exec(ctx, schema); err != nil {
		return fmt.Errorf("create the shop's tables: %w", err)
	}
	return nil
}

// Restock sets the stock of sku.
func Restock(ctx context.Context, pool *pgxpool.Pool, sku string, n int) error {
	_, err := pool.Exec(ctx, `INSERT INTO shop_stock (sku, on_hand) VALUES ($1, $2)
		ON CONFLICT (sku) DO UPDATE SET on_hand = excluded.on_hand`, sku, n)
	return err
}

// ErrOutOfStock is returned by PlaceOrder when the SKU has no stock left.
var ErrOutOfStock = errors.New("out of stock")

// PlaceOrder creates an order, enqueues its receipt and its charge, and
// takes the item from stock, all in one transaction. If any of it fails,
// nothing happened: no order, and no job for an order that does not exist.
// It returns the order's ID, also when the transaction rolled back (that ID
// then names no order).
func PlaceOrder(ctx context.Context, pool *pgxpool.Pool, e *engine.Engine, sku string, cents int64) (int64, error) {
	var id int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `INSERT INTO shop_orders (sku, cents) VALUES ($1, $2) RETURNING id`, sku, cents).Scan(&id); err != nil {
			return err
		}
		// The jobs carry the order's ID, not a copy of the order: they read
		// it when they run.
		var h *Handlers
		if _, err := engine.EnqueueTx(ctx, e, tx, h.SendReceipt, id, engine.JobOptions{Key: ReceiptKey(id)}); err != nil {
			return err
		}
		if _, err := engine.EnqueueTx(ctx, e, tx, h.ChargeOrder, id, engine.JobOptions{Key: ChargeKey(id)}); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE shop_stock SET on_hand = on_hand - 1 WHERE sku = $1 AND on_hand > 0`, sku)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("order %d for %s: %w", id, sku, ErrOutOfStock)
		}
		return nil
	})
	return id, err
}

// ReceiptKey is the idempotency key of an order's receipt job.
func ReceiptKey(orderID int64) string { return fmt.Sprintf("receipt:%d", orderID) }

// ChargeKey is the idempotency key of an order's charge job.
func ChargeKey(orderID int64) string { return fmt.Sprintf("charge:%d", orderID) }

// Handlers are the shop's jobs. Each prints what it does with its
// idempotency key.
type Handlers struct {
	// Pool is the shop's database, which is also the engine's.
	Pool *pgxpool.Pool
	// Out receives what the jobs do. Default: discarded.
	Out io.Writer
	// RowDelay is how long a backfill job works on its row. Default 0.
	RowDelay time.Duration
	// InvoicesFixed says whether the fix for the invoice export has
	// shipped; until it has, ExportInvoice fails for good.
	InvoicesFixed atomic.Bool

	mu sync.Mutex
}

// Register registers the jobs on e, on their queues.
func Register(e *engine.Engine, h *Handlers) error {
	critical := activity.Options{Queue: Critical}
	batch := activity.Options{Queue: Batch}
	return errors.Join(
		engine.RegisterActivity(e, h.SendReceipt, critical),
		engine.RegisterActivity(e, h.ChargeOrder, critical),
		engine.RegisterActivity(e, h.SendPasswordReset, critical),
		engine.RegisterActivity(e, h.ExportInvoice, batch),
		engine.RegisterActivity(e, h.BackfillRow, batch),
	)
}

// SendReceipt emails the order's receipt, once however often it is
// delivered: in one transaction it claims the receipt's row with INSERT ...
// ON CONFLICT DO NOTHING and sends the email only if the insert took. A
// failed send rolls the claim back, so a retry can send it; a concurrent
// second delivery waits for the first to commit and then does nothing. It
// returns whether this delivery sent it.
func (h *Handlers) SendReceipt(ctx context.Context, orderID int64) (bool, error) {
	sent := false
	err := pgx.BeginFunc(ctx, h.Pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO shop_receipts (order_id, sent_at) VALUES ($1, now()) ON CONFLICT (order_id) DO NOTHING`, orderID)
		if err != nil || tag.RowsAffected() == 0 {
			return err
		}
		sent = true
		return nil // the mailer would be called here; its error would roll the claim back
	})
	if err != nil {
		return false, err
	}
	if sent {
		h.say(ctx, "sent the receipt for order %d", orderID)
	} else {
		h.say(ctx, "the receipt for order %d was sent before: did nothing", orderID)
	}
	return sent, nil
}

// ChargeOrder records the order's payment and marks it paid, exactly once:
// engine.ExactlyOnce runs the writes in a transaction that also records the
// job's idempotency key, so a second delivery of the key returns the
// recorded payment ID without charging again.
func (h *Handlers) ChargeOrder(ctx context.Context, orderID int64) (int64, error) {
	applied := false
	paymentID, err := engine.ExactlyOnce(ctx, h.Pool, func(ctx context.Context, tx pgx.Tx) (int64, error) {
		applied = true
		var cents int64
		if err := tx.QueryRow(ctx, `SELECT cents FROM shop_orders WHERE id = $1 FOR UPDATE`, orderID).Scan(&cents); err != nil {
			return 0, fmt.Errorf("load order %d: %w", orderID, err)
		}
		var id int64
		if err := tx.QueryRow(ctx, `INSERT INTO shop_payments (order_id, cents, created_at) VALUES ($1, $2, now()) RETURNING id`, orderID, cents).Scan(&id); err != nil {
			return 0, err
		}
		_, err := tx.Exec(ctx, `UPDATE shop_orders SET status = 'paid' WHERE id = $1 AND status = 'new'`, orderID)
		return id, err
	})
	if err != nil {
		return 0, err
	}
	if applied {
		h.say(ctx, "charged order %d: payment %d", orderID, paymentID)
	} else {
		h.say(ctx, "this key was applied before: returned payment %d, charged nothing", paymentID)
	}
	return paymentID, nil
}

// ExportInvoice exports the order's invoice. Until the fix ships it fails
// with a permanent error: no retry can fix a bug, so the job goes straight
// to the dead-letter table.
func (h *Handlers) ExportInvoice(ctx context.Context, orderID int64) (struct{}, error) {
	if !h.InvoicesFixed.Load() {
		h.say(ctx, "cannot export the invoice of order %d: the template has no VAT field", orderID)
		return struct{}{}, activity.Permanent(fmt.Errorf("invoice template for order %d has no VAT field", orderID))
	}
	if _, err := h.Pool.Exec(ctx, `INSERT INTO shop_invoices (order_id, exported_at) VALUES ($1, now()) ON CONFLICT (order_id) DO NOTHING`, orderID); err != nil {
		return struct{}{}, err
	}
	h.say(ctx, "exported the invoice of order %d", orderID)
	return struct{}{}, nil
}

// Row is one row of a backfill.
type Row struct {
	Batch string
	No    int
}

// BackfillRow recomputes one row of a backfill: slow batch work.
func (h *Handlers) BackfillRow(ctx context.Context, r Row) (struct{}, error) {
	t := time.NewTimer(h.RowDelay)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return struct{}{}, ctx.Err()
	case <-t.C:
	}
	_, err := h.Pool.Exec(ctx, `INSERT INTO shop_backfill (batch, row_no, done_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, r.Batch, r.No)
	return struct{}{}, err
}

// SendPasswordReset emails a password-reset link: the job a user waits for.
func (h *Handlers) SendPasswordReset(ctx context.Context, address string) (struct{}, error) {
	key := activity.GetInfo(ctx).IdempotencyKey
	if _, err := h.Pool.Exec(ctx, `INSERT INTO shop_emails (idempotency_key, address, sent_at) VALUES ($1, $2, now()) ON CONFLICT DO NOTHING`, key, address); err != nil {
		return struct{}{}, err
	}
	h.say(ctx, "sent a password reset to %s", address)
	return struct{}{}, nil
}

func (h *Handlers) say(ctx context.Context, format string, args ...any) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.Out == nil {
		return
	}
	info := activity.GetInfo(ctx)
	fmt.Fprintf(h.Out, "   %-17s %s  (idempotency key %s, attempt %d, queue %s)\n", info.Name, fmt.Sprintf(format, args...), info.IdempotencyKey, info.Attempt, info.Queue)
}

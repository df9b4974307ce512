package shop

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
)

type bundle struct {
	env *durabletest.Env
	h   *Handlers
	ctx context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, Engine: engine.Options{Queues: Queues}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	require.NoError(t, Migrate(ctx, env.Pool))
	require.NoError(t, Restock(ctx, env.Pool, "BOOK-42", 1))
	h := &Handlers{Pool: env.Pool}
	require.NoError(t, Register(env.Engine, h))
	env.Run()
	return bundle{env: env, h: h, ctx: ctx}
}

// count runs a count(*) query.
func (b bundle) count(t *testing.T, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, b.env.Pool.QueryRow(b.ctx, sql, args...).Scan(&n))
	return n
}

// waitGone waits until the job with the key has finished.
func (b bundle) waitGone(t *testing.T, key string) {
	t.Helper()
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key = $1`, key) == 0
	}, 20*time.Second, 5*time.Millisecond, "job %s finishes", key)
}

func TestPlaceOrderEnqueuesWithTheOrderOrNotAtAll(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := PlaceOrder(b.ctx, b.env.Pool, b.env.Engine, "BOOK-42", 4900)
	require.NoError(t, err)
	b.waitGone(t, ReceiptKey(id))
	b.waitGone(t, ChargeKey(id))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM shop_receipts WHERE order_id = $1`, id))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM shop_orders WHERE id = $1 AND status = 'paid'`, id))

	lost, err := PlaceOrder(b.ctx, b.env.Pool, b.env.Engine, "BOOK-42", 4900)
	require.ErrorIs(t, err, ErrOutOfStock)
	require.Zero(t, b.count(t, `SELECT count(*) FROM shop_orders WHERE id = $1`, lost))
	require.Zero(t, b.count(t, `SELECT count(*) FROM durable_activity_tasks WHERE idempotency_key IN ($1, $2)`, ReceiptKey(lost), ChargeKey(lost)),
		"the rolled-back order's jobs went with it")
}

func TestRedeliveredJobsHaveOneEffect(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := PlaceOrder(b.ctx, b.env.Pool, b.env.Engine, "BOOK-42", 4900)
	require.NoError(t, err)
	for range 2 { // the first delivery came with the order
		b.waitGone(t, ReceiptKey(id))
		b.waitGone(t, ChargeKey(id))
		_, err := engine.Enqueue(b.ctx, b.env.Engine, b.h.SendReceipt, id, engine.JobOptions{Key: ReceiptKey(id)})
		require.NoError(t, err)
		_, err = engine.Enqueue(b.ctx, b.env.Engine, b.h.ChargeOrder, id, engine.JobOptions{Key: ChargeKey(id)})
		require.NoError(t, err)
	}
	b.waitGone(t, ReceiptKey(id))
	b.waitGone(t, ChargeKey(id))
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM shop_receipts WHERE order_id = $1`, id), "ON CONFLICT DO NOTHING")
	require.Equal(t, 1, b.count(t, `SELECT count(*) FROM shop_payments WHERE order_id = $1`, id), "ExactlyOnce")
}

func TestPermanentFailureIsDeadLetteredUntilRedriven(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id, err := PlaceOrder(b.ctx, b.env.Pool, b.env.Engine, "BOOK-42", 4900)
	require.NoError(t, err)
	_, err = engine.Enqueue(b.ctx, b.env.Engine, b.h.ExportInvoice, id, engine.JobOptions{Key: "invoice"})
	require.NoError(t, err)

	var ds []engine.DeadLetter
	require.Eventually(t, func() bool {
		ds, err = b.env.Engine.DeadLetters(b.ctx, engine.DeadLetterFilter{Pending: true})
		return err == nil && len(ds) == 1
	}, 20*time.Second, 5*time.Millisecond, "the export lands in the dead-letter table")
	d := ds[0]
	require.Equal(t, engine.DeadJob, d.Kind)
	require.Equal(t, "ExportInvoice", d.Type)
	require.Equal(t, Batch, d.Queue)
	require.Equal(t, "invoice", d.IdempotencyKey)
	require.Equal(t, 1, d.Attempts, "a permanent error is not retried")
	require.Equal(t, "permanent", d.ErrorClass)
	require.Zero(t, b.count(t, `SELECT count(*) FROM shop_invoices`))

	b.h.InvoicesFixed.Store(true)
	res, err := b.env.Engine.Redrive(b.ctx, d.ID)
	require.NoError(t, err)
	require.True(t, res.Redriven)
	require.Eventually(t, func() bool {
		return b.count(t, `SELECT count(*) FROM shop_invoices WHERE order_id = $1`, id) == 1
	}, 20*time.Second, 5*time.Millisecond, "the redriven export runs")
	pending, err := b.env.Engine.DeadLetters(b.ctx, engine.DeadLetterFilter{Pending: true})
	require.NoError(t, err)
	require.Empty(t, pending)
}

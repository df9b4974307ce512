package main

import (
	"context"
	"io"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
)

func TestJobsProgramEndToEnd(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	out := &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const rows = 20
	require.NoError(t, run(ctx, []string{"-db", url, "-backfill", "20", "-row-delay", "50ms"}, out))
	got := out.String()
	t.Log(got)

	for _, want := range []string{
		// 1. the order and its jobs commit together; the rolled-back order leaves no job
		"order 1 placed; its jobs receipt:1 and charge:1 were enqueued in the order's transaction",
		"SendReceipt       sent the receipt for order 1  (idempotency key receipt:1, attempt 1, queue critical)",
		"ChargeOrder       charged order 1: payment 1  (idempotency key charge:1, attempt 1, queue critical)",
		"-> order 2 does not exist (0 rows), and neither do its jobs (0 with keys receipt:2, charge:2)",
		// 2. the idempotent consumer
		"SendReceipt       the receipt for order 1 was sent before: did nothing  (idempotency key receipt:1",
		"-> order 1 has 1 receipt",
		// 3. ExactlyOnce
		"ChargeOrder       this key was applied before: returned payment 1, charged nothing  (idempotency key charge:1",
		"-> order 1 has 1 payment and is paid",
		// 4. dead letter and redrive
		"ExportInvoice     cannot export the invoice of order 1: the template has no VAT field  (idempotency key invoice:1, attempt 1, queue batch)",
		"kind job, type ExportInvoice, queue batch, key invoice:1, payload 1",
		`1 attempt(s), error class permanent, last error "invoice template for order 1 has no VAT field"`,
		"the fix ships; redrive it with eng.Redrive(ctx, 1) (or: durable dlq redrive 1)",
		"ExportInvoice     exported the invoice of order 1  (idempotency key invoice:1, attempt 1, queue batch)",
		"redriving it again does nothing (redriven: false)",
		// 5. queues
		"SendPasswordReset sent a password reset to ada@example.com  (idempotency key password-reset:1, attempt 1, queue critical)",
		"-> the backfill finished 20 rows in",
	} {
		require.Contains(t, got, want)
	}
	m := regexp.MustCompile(`the password reset was sent \S+ after it was enqueued, with (\d+) of 20 backfill rows still waiting`).FindStringSubmatch(got)
	require.NotNil(t, m, "the program reports the password reset")
	require.NotEqual(t, "0", m[1], "the password reset did not wait for the backfill")

	// The database agrees.
	pool, err := pgxpool.New(ctx, url)
	require.NoError(t, err)
	defer pool.Close()
	var (
		orders, paid, receipts, payments, effects, invoices, emails, backfilled, doneBeforeReset int
		deadLetters, redriven, pendingTasks                                                      int
	)
	require.NoError(t, pool.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM shop_orders),
		(SELECT count(*) FROM shop_orders WHERE id = 1 AND status = 'paid'),
		(SELECT count(*) FROM shop_receipts WHERE order_id = 1),
		(SELECT count(*) FROM shop_payments WHERE order_id = 1),
		(SELECT count(*) FROM durable_effects WHERE idempotency_key = 'charge:1'),
		(SELECT count(*) FROM shop_invoices WHERE order_id = 1),
		(SELECT count(*) FROM shop_emails),
		(SELECT count(*) FROM shop_backfill),
		(SELECT count(*) FROM shop_backfill WHERE done_at <= (SELECT sent_at FROM shop_emails)),
		(SELECT count(*) FROM durable_dead_letters WHERE kind = 'job' AND type = 'ExportInvoice' AND idempotency_key = 'invoice:1'),
		(SELECT count(*) FROM durable_dead_letters WHERE redriven_at IS NOT NULL),
		(SELECT count(*) FROM durable_activity_tasks)`).Scan(
		&orders, &paid, &receipts, &payments, &effects, &invoices, &emails, &backfilled, &doneBeforeReset,
		&deadLetters, &redriven, &pendingTasks))
	require.Equal(t, 1, orders, "the rolled-back order was never created")
	require.Equal(t, 1, paid)
	require.Equal(t, 1, receipts, "two deliveries, one receipt")
	require.Equal(t, 1, payments, "two deliveries, one payment")
	require.Equal(t, 1, effects, "ExactlyOnce recorded the charge's key")
	require.Equal(t, 1, invoices, "the redriven job exported the invoice")
	require.Equal(t, 1, emails)
	require.Equal(t, rows, backfilled)
	require.Less(t, doneBeforeReset, rows, "the password reset was sent while the backfill was still running")
	require.Equal(t, 1, deadLetters)
	require.Equal(t, 1, redriven)
	require.Zero(t, pendingTasks, "every job finished")
}

// Without PostgreSQL the example says what it needs instead of failing
// somewhere inside.
func TestJobsNeedPostgres(t *testing.T) {
	err := run(t.Context(), []string{"-db", filepath.Join(t.TempDir(), "dev.db")}, io.Discard)
	require.ErrorContains(t, err, "this example needs PostgreSQL")
}

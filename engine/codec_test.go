package engine_test

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// secret is in every payload of the codec tests, and must be nowhere in
// the database.
const secret = "Zq7-PLAINTEXT-MARKER"

func aesCodec(t *testing.T, b byte) codec.PayloadCodec {
	t.Helper()
	c, err := codec.AESGCM(bytes.Repeat([]byte{b}, 32))
	require.NoError(t, err)
	return c
}

// requireNoSecret reads every row of every durable_* table as text and
// requires the secret in none of them, in the clear or as hex (bytea).
func requireNoSecret(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	rows, err := pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema() AND tablename LIKE 'durable\_%' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Contains(t, tables, "durable_events")
	asHex := hex.EncodeToString([]byte(secret))
	envelopes := 0
	for _, table := range tables {
		rows, err := pool.Query(ctx, `SELECT t::text FROM `+pgx.Identifier{table}.Sanitize()+` t`)
		require.NoError(t, err)
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		for _, s := range texts {
			require.NotContains(t, s, secret, "table %s holds a payload in the clear", table)
			require.NotContains(t, s, asHex, "table %s holds a payload in the clear, as bytes", table)
			envelopes += strings.Count(s, codec.EnvelopeKey)
		}
	}
	require.NotZero(t, envelopes, "payloads are stored, encoded")
}

type codecInput struct {
	Note  string
	Round int
}

// codecFlows are the workflows and activities of the codec tests; each
// puts the secret in the payloads it makes.
type codecFlows struct {
	pool     *pgxpool.Pool
	sleep    time.Duration // Main's durable timer
	holding  chan struct{} // Hold has heartbeated
	release  chan struct{} // lets Hold finish
	declined atomic.Bool   // Decline fails while set
	redriven atomic.Int32  // Decline's successes
}

// Main continues as new once, then records a side effect, runs an
// activity, a child workflow and a timer, and waits for a signal; a query
// handler answers with a secret too.
func (c *codecFlows) Main(ctx workflow.Context, in codecInput) (string, error) {
	if in.Round == 0 {
		return "", workflow.NewContinueAsNewError(ctx, codecInput{Note: in.Note + "-continued", Round: 1})
	}
	if err := workflow.SetQueryHandler(ctx, "state", func() (string, error) { return secret + "-state", nil }); err != nil {
		return "", err
	}
	se := workflow.SideEffect(ctx, func() string { return secret + "-side-effect" })
	held, err := workflow.ExecuteActivity(ctx, c.Hold, secret+"-activity").Get(ctx)
	if err != nil {
		return "", err
	}
	child, err := workflow.ExecuteChildWorkflow(ctx, c.Child, secret+"-child", workflow.ChildOptions{}).Get(ctx)
	if err != nil {
		return "", err
	}
	if err := workflow.Sleep(ctx, c.sleep); err != nil {
		return "", err
	}
	note, err := workflow.GetSignalChannel[string](ctx, "note").Receive(ctx)
	if err != nil {
		return "", err
	}
	return strings.Join([]string{in.Note, se, held, child, note}, "|"), nil
}

func (c *codecFlows) Child(_ workflow.Context, in string) (string, error) { return in + "-done", nil }

// Hold heartbeats, waits to be released, then applies an effect exactly
// once (and reads it back as a redelivery would).
func (c *codecFlows) Hold(ctx context.Context, in string) (string, error) {
	if err := activity.RecordHeartbeat(ctx, secret+"-heartbeat"); err != nil {
		return "", err
	}
	c.holding <- struct{}{}
	select {
	case <-c.release:
	case <-ctx.Done():
		return "", ctx.Err()
	}
	apply := func(context.Context, pgx.Tx) (string, error) { return secret + "-effect", nil }
	first, err := engine.ExactlyOnce(ctx, c.pool, apply)
	if err != nil {
		return "", err
	}
	again, err := engine.ExactlyOnce(ctx, c.pool, func(context.Context, pgx.Tx) (string, error) {
		return "", errors.New("ran twice")
	})
	if err != nil {
		return "", err
	}
	if again != first {
		return "", errors.New("the recorded effect reads back as " + again)
	}
	return in + "-held+" + first, nil
}

// Waiter stays open: a run for the replay gate.
func (c *codecFlows) Waiter(ctx workflow.Context, in string) (string, error) {
	v, err := workflow.GetSignalChannel[string](ctx, "never").Receive(ctx)
	return in + v, err
}

// Fragile fails when Decline does: a dead-lettered workflow.
func (c *codecFlows) Fragile(ctx workflow.Context, in string) (string, error) {
	return workflow.ExecuteActivity(ctx, c.Decline, in).Get(ctx)
}

func (c *codecFlows) Decline(_ context.Context, in string) (string, error) {
	if c.declined.Load() {
		return "", activity.Permanent(errors.New("declined"))
	}
	c.redriven.Add(1)
	return in + "-redriven", nil
}

func (c *codecFlows) register(t *testing.T, e *engine.Engine) {
	t.Helper()
	require.NoError(t, engine.RegisterWorkflow(e, c.Main, engine.WorkflowOptions{Name: "Main"}))
	require.NoError(t, engine.RegisterWorkflow(e, c.Child, engine.WorkflowOptions{Name: "Child"}))
	require.NoError(t, engine.RegisterWorkflow(e, c.Waiter, engine.WorkflowOptions{Name: "Waiter"}))
	require.NoError(t, engine.RegisterWorkflow(e, c.Fragile, engine.WorkflowOptions{Name: "Fragile"}))
	require.NoError(t, engine.RegisterActivity(e, c.Hold, activity.Options{Name: "Hold"}))
	require.NoError(t, engine.RegisterActivity(e, c.Decline, activity.Options{Name: "Decline", Retry: fastRetry(1)}))
}

func TestCodecKeepsEveryPayloadOutOfTheDatabase(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	e := newEngine(t, pool, engine.Options{Codec: aesCodec(t, 1)})
	c := &codecFlows{pool: pool, holding: make(chan struct{}, 1), release: make(chan struct{}), sleep: 10 * time.Millisecond}
	c.declined.Store(true)
	c.register(t, e)
	run(t, e)
	ctx := resultCtx(t)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	main, err := engine.StartTx(ctx, e, tx, c.Main, codecInput{Note: secret + "-input"}, engine.StartOptions{ID: "codec-main"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	_, err = engine.Start(ctx, e, c.Waiter, secret+"-waiter", engine.StartOptions{ID: "codec-waiter"})
	require.NoError(t, err)
	_, err = engine.Start(ctx, e, c.Fragile, secret+"-fragile", engine.StartOptions{ID: "codec-fragile"})
	require.NoError(t, err)
	_, err = engine.Enqueue(ctx, e, c.Decline, secret+"-job", engine.JobOptions{})
	require.NoError(t, err)

	// While Hold runs, its input and heartbeat are in the activity's row.
	select {
	case <-c.holding:
	case <-ctx.Done():
		t.Fatal("Hold did not start")
	}
	info, err := e.Describe(ctx, "codec-main")
	require.NoError(t, err)
	require.Len(t, info.PendingActivities, 1)
	require.JSONEq(t, `"`+secret+`-heartbeat"`, string(info.PendingActivities[0].Heartbeat), "Describe decodes")
	requireNoSecret(t, ctx, pool)

	tx, err = pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, engine.SignalTx(ctx, e, tx, "codec-main", "note", secret+"-signal"))
	require.NoError(t, tx.Commit(ctx))
	close(c.release)

	got, err := main.Result(ctx)
	require.NoError(t, err)
	want := strings.Join([]string{
		secret + "-input-continued", secret + "-side-effect", secret + "-activity-held+" + secret + "-effect",
		secret + "-child-done", secret + "-signal",
	}, "|")
	require.Equal(t, want, got, "workflow code sees plaintext")

	// A failed job and a failed workflow are dead letters, with their
	// payloads readable through the engine; redriven, they run on them.
	job := waitDeadLetter(t, e, engine.DeadJob)
	require.JSONEq(t, `"`+secret+`-job"`, string(job.Payload))
	wf := waitDeadLetter(t, e, engine.DeadWorkflow)
	require.JSONEq(t, `"`+secret+`-fragile"`, string(wf.Payload))
	requireNoSecret(t, ctx, pool)
	c.declined.Store(false)
	// An engine without the key (as the durable CLI is) redrives them.
	keyless := newEngine(t, pool, engine.Options{})
	for _, id := range []int64{job.ID, wf.ID} {
		res, err := keyless.Redrive(ctx, id)
		require.NoError(t, err)
		require.True(t, res.Redriven)
	}
	fragile, err := engine.GetRun[string](ctx, e, "codec-fragile")
	require.NoError(t, err)
	got, err = fragile.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, secret+"-fragile-redriven", got)
	require.Eventually(t, func() bool { return c.redriven.Load() == 2 }, 20*time.Second, 5*time.Millisecond,
		"the redriven job runs on its decoded input")

	requireNoSecret(t, ctx, pool)

	// Everything that reads goes through the codec.
	info, err = e.Describe(ctx, "codec-main") // the run it continued in
	require.NoError(t, err)
	require.Contains(t, string(info.Input), secret+"-input-continued")
	require.Contains(t, string(info.Result), secret+"-signal")
	events, err := e.History(ctx, "codec-main")
	require.NoError(t, err)
	b, err := json.Marshal(events)
	require.NoError(t, err)
	for _, part := range []string{"-input-continued", "-side-effect", "-activity-held", "-child-done", "-signal"} {
		require.Contains(t, string(b), secret+part, "History shows plaintext")
	}
	require.NotContains(t, string(b), codec.EnvelopeKey)
	state, err := engine.Query[string](ctx, e, "codec-main", "state")
	require.NoError(t, err)
	require.Equal(t, secret+"-state", state)
	h, err := e.ExportHistory(ctx, "codec-main")
	require.NoError(t, err)
	var exported bytes.Buffer
	require.NoError(t, history.Export(&exported, h))
	require.Contains(t, exported.String(), secret+"-side-effect")
	require.NotContains(t, exported.String(), codec.EnvelopeKey)
	require.NoError(t, e.ReplayRun(ctx, "codec-main"))
	require.NoError(t, e.ReplayRun(ctx, "codec-fragile"))
	checked, err := e.CheckOpenRuns(ctx, engine.CheckOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, checked, "the waiter replays from its decoded history")
	ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
	require.NoError(t, err)
	for _, d := range ds {
		require.Contains(t, string(d.Payload), secret)
	}
}

func TestCodecWrongKeyIsAClearErrorAndLosesNothing(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	c := &codecFlows{}
	a := newEngine(t, pool, engine.Options{Codec: aesCodec(t, 1)})
	c.register(t, a)

	// A worker with the wrong key fails the run's workflow task, naming the
	// run and the payload, and writes nothing else.
	b := newEngine(t, pool, engine.Options{Codec: aesCodec(t, 2)})
	c.register(t, b)
	bctx, stopB := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(bctx) }()
	r, err := engine.Start(ctx, a, c.Waiter, secret+"-waiter", engine.StartOptions{ID: "wrong-key"})
	require.NoError(t, err)
	var info engine.RunInfo
	require.Eventually(t, func() bool {
		info, err = a.Describe(ctx, "wrong-key")
		return err == nil && info.TaskError != ""
	}, 20*time.Second, 5*time.Millisecond, "the wrong-key worker fails the task for all to see")
	stopB()
	require.NoError(t, <-bdone)
	require.Contains(t, info.TaskError, "run "+r.RunID+" event 1: workflow_started input")
	require.Contains(t, info.TaskError, `does not decrypt with key "": the key is wrong`)
	require.Equal(t, engine.StatusRunning, info.Status)
	require.Equal(t, int64(1), info.LastEventID, "the failed task wrote no event")

	// Reads with the wrong key, or with none, fail the same way.
	_, err = engine.GetRun[string](ctx, b, "wrong-key")
	require.ErrorContains(t, err, "run "+r.RunID+" input: decode payload: aes-gcm")
	_, err = b.History(ctx, "wrong-key")
	require.ErrorContains(t, err, r.RunID)
	_, err = b.ExportHistory(ctx, "wrong-key")
	require.ErrorContains(t, err, r.RunID)
	none := newEngine(t, pool, engine.Options{})
	_, err = none.Describe(ctx, "wrong-key")
	require.ErrorIs(t, err, codec.ErrNoCodec)
	require.ErrorContains(t, err, "set engine.Options.Codec")

	// The right key runs it on.
	run(t, a)
	require.NoError(t, engine.Signal(ctx, a, "wrong-key", "never", "-signaled"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, secret+"-waiter-signaled", got)
	requireNoSecret(t, ctx, pool)
}

// refusing is a codec whose Encode fails on payloads that say "refuse".
type refusing struct{ codec.PayloadCodec }

func (r refusing) Encode(p []byte) ([]byte, error) {
	if bytes.Contains(p, []byte("refuse")) {
		return nil, errors.New("key service unavailable")
	}
	return r.PayloadCodec.Encode(p)
}

func TestCodecEncodeErrorFailsTheWriteCleanly(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, Engine: engine.Options{Codec: refusing{aesCodec(t, 3)}}})
	e, pool := env.Engine, env.Pool
	c := &codecFlows{}
	c.register(t, e)
	ctx := resultCtx(t)
	count := func() (n int) {
		t.Helper()
		require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM durable_runs) + (SELECT count(*) FROM durable_events)
			+ (SELECT count(*) FROM durable_workflow_tasks) + (SELECT count(*) FROM durable_activity_tasks)`).Scan(&n))
		return n
	}

	_, err := engine.Start(ctx, e, c.Waiter, "refuse", engine.StartOptions{ID: "refused"})
	require.ErrorContains(t, err, "input: encode payload: key service unavailable")
	_, err = engine.Enqueue(ctx, e, c.Decline, "refuse", engine.JobOptions{})
	require.ErrorContains(t, err, "encode payload: key service unavailable")
	require.Zero(t, count(), "nothing was written")

	// In a transaction, the refused write leaves the transaction usable.
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = engine.StartTx(ctx, e, tx, c.Waiter, "refuse", engine.StartOptions{ID: "refused"})
	require.Error(t, err)
	r, err := engine.StartTx(ctx, e, tx, c.Waiter, "fine", engine.StartOptions{ID: "accepted"})
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	before := count()

	err = engine.Signal(ctx, e, "accepted", "never", "refuse")
	require.ErrorContains(t, err, "encode payload: key service unavailable")
	require.Equal(t, before, count(), "the refused signal wrote nothing")

	env.Run()
	require.NoError(t, engine.Signal(ctx, e, "accepted", "never", "+ok"))
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "fine+ok", got)
}

// TestCodecWrongKeyCannotWriteIntoARun: an engine with the wrong key, which
// cannot read a run, cannot write a payload into it either: its signals are
// refused before anything is written, and the run carries on with the
// engine that has its key.
func TestCodecWrongKeyCannotWriteIntoARun(t *testing.T) {
	t.Parallel()
	pool := pgtest.Pool(t)
	ctx := resultCtx(t)
	c := &codecFlows{}
	right := newEngine(t, pool, engine.Options{Codec: aesCodec(t, 1)})
	c.register(t, right)
	run(t, right)
	wrong := newEngine(t, pool, engine.Options{Codec: aesCodec(t, 2)})
	c.register(t, wrong)
	r, err := engine.Start(ctx, right, c.Waiter, secret+"-waiter", engine.StartOptions{ID: "wrong-signal"})
	require.NoError(t, err)

	requireRefused := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, engine.ErrCodecMismatch)
		require.ErrorContains(t, err, "run "+r.RunID+" input")
		require.ErrorContains(t, err, `does not decrypt with key ""`, "the error names the key")
		require.ErrorContains(t, err, "engine.Options.Codec", "the error says what to do")
	}
	requireRefused(engine.Signal(ctx, wrong, "wrong-signal", "never", "-wrong"))
	_, err = engine.SignalWithStart(ctx, wrong, c.Waiter, "unused", engine.StartOptions{ID: "wrong-signal"}, "never", "-wrong")
	requireRefused(err)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	requireRefused(engine.SignalTx(ctx, wrong, tx, "wrong-signal", "never", "-wrong"))
	require.NoError(t, tx.Commit(ctx), "the refusal leaves the caller's transaction usable")
	events, err := right.History(ctx, "wrong-signal")
	require.NoError(t, err)
	require.NotContains(t, eventTypes(events), "signal_received", "nothing was written")

	require.NoError(t, engine.Signal(ctx, right, "wrong-signal", "never", "-right"))
	got, err := r.Result(ctx)
	require.NoError(t, err, "the run stays healthy")
	require.Equal(t, secret+"-waiter-right", got)
}

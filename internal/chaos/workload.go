package chaos

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
)

// The registered names of the workload.
const (
	flowName   = "chaos.Flow"
	workName   = "chaos.Work"
	beatName   = "chaos.Beat"
	effectName = "chaos.Effect"
	signalName = "chaos.signal"
)

// FlowInput is the input of the workload's workflow. Everything the
// workflow does, and so its result, follows from it and from the signals
// the driver sends, whose values it lists.
type FlowInput struct {
	// Seq numbers the workflow in the workload.
	Seq int `json:"seq"`
	// Steps run one after the other, Parallel all at once.
	Steps    []WorkInput `json:"steps"`
	Parallel []WorkInput `json:"parallel"`
	// BeatMS is how long the heartbeating activity runs.
	BeatMS int `json:"beat_ms"`
	// SleepMS is the durable timer.
	SleepMS int `json:"sleep_ms"`
	// Signals are the values the driver sends, in order; the workflow waits
	// for all of them.
	Signals []int `json:"signals"`
}

// WorkInput is the input of one Work activity.
type WorkInput struct {
	Seq        int `json:"seq"`
	Step       int `json:"step"`
	DurationMS int `json:"duration_ms"`
	// FailTimes is how many attempts fail (transiently) before one works.
	FailTimes int `json:"fail_times"`
	// Gen is the generation of the workflow code that scheduled it, for
	// the ledger (see workload.Versioned); 0 outside versioned runs.
	Gen int `json:"gen,omitempty"`
}

// FlowResult is what the workflow returns.
type FlowResult struct {
	Seq     int   `json:"seq"`
	Work    int64 `json:"work"`
	Beat    int64 `json:"beat"`
	Effect  int64 `json:"effect"`
	Signals int64 `json:"signals"`
}

// Signal is the payload of a signal. Index makes a signal sent twice (a
// retry after an error that hid a commit) count once.
type Signal struct {
	Index int `json:"index"`
	Value int `json:"value"`
}

// newInput draws the input of workflow seq.
func newInput(rng *rand.Rand, seq int) FlowInput {
	in := FlowInput{Seq: seq, BeatMS: 150 + rng.IntN(250), SleepMS: 200 + rng.IntN(300)}
	work := func(step int) WorkInput {
		w := WorkInput{Seq: seq, Step: step, DurationMS: rng.IntN(51)}
		if rng.IntN(4) == 0 {
			w.FailTimes = 1 + rng.IntN(2)
		}
		return w
	}
	for i := range 3 {
		in.Steps = append(in.Steps, work(i))
	}
	for i := range 2 {
		in.Parallel = append(in.Parallel, work(10+i))
	}
	for range 2 {
		in.Signals = append(in.Signals, 1+rng.IntN(1000))
	}
	return in
}

// The values the activities return: functions of their inputs alone.
func workValue(in WorkInput) int64 { return int64(in.Seq)*1000 + int64(in.Step)*17 + 1 }
func beatValue(seq int) int64      { return int64(seq)*7 + 3 }
func effectValue(seq int) int64    { return int64(seq)*3 + 1 }

// Expected returns the result the workflow must return for in.
func Expected(in FlowInput) FlowResult {
	r := FlowResult{Seq: in.Seq, Beat: beatValue(in.Seq), Effect: effectValue(in.Seq)}
	for _, w := range append(append([]WorkInput(nil), in.Steps...), in.Parallel...) {
		r.Work += workValue(w)
	}
	for _, v := range in.Signals {
		r.Signals += int64(v)
	}
	return r
}

// workload holds the workflow and activities. Its activities write to the
// database on pool; a workload for replay has none.
type workload struct {
	pool  *pgxpool.Pool
	pid   int
	log   *slog.Logger
	lease time.Duration
	// gen is the generation of the workflow code: 1 before the rig's
	// upgrade, 2 after it (see Versioned).
	gen int
	// replay skips the time workflow code spends computing (see compute):
	// the checker replays thousands of histories.
	replay bool
}

// Flow is the workflow: steps, parallel steps, a heartbeating activity, a
// durable timer, an exactly-once effect, and the signals.
func (w *workload) Flow(ctx workflow.Context, in FlowInput) (FlowResult, error) {
	res := FlowResult{Seq: in.Seq}
	for _, s := range in.Steps {
		v, err := workflow.ExecuteActivity(ctx, w.Work, s).Get(ctx)
		if err != nil {
			return res, err
		}
		res.Work += v
	}
	var fs []workflow.Future[int64]
	for _, s := range in.Parallel {
		fs = append(fs, workflow.ExecuteActivity(ctx, w.Work, s))
	}
	beat := workflow.ExecuteActivity(ctx, w.Beat, BeatInput{Seq: in.Seq, DurationMS: in.BeatMS})
	for _, f := range fs {
		v, err := f.Get(ctx)
		if err != nil {
			return res, err
		}
		res.Work += v
	}
	if err := workflow.Sleep(ctx, time.Duration(in.SleepMS)*time.Millisecond); err != nil {
		return res, err
	}
	var err error
	if res.Beat, err = beat.Get(ctx); err != nil {
		return res, err
	}
	if res.Effect, err = workflow.ExecuteActivity(ctx, w.Effect, in.Seq).Get(ctx); err != nil {
		return res, err
	}
	sigs := workflow.GetSignalChannel[Signal](ctx, signalName)
	seen := map[int]bool{}
	for len(seen) < len(in.Signals) {
		s, err := sigs.Receive(ctx)
		if err != nil {
			return res, err
		}
		if !seen[s.Index] {
			seen[s.Index] = true
			res.Signals += int64(s.Value)
		}
	}
	return res, nil
}

// errTransient is the planned failure of Work's first attempts. Its text
// holds what PostgreSQL cannot store as it is (a NUL byte, bytes that are
// not UTF-8): the engine must record it escaped and retry the activity.
var errTransient = errors.New("planned transient failure \x00 \xff")

// Work sleeps, fails its first in.FailTimes attempts, then records its
// effect in the ledger and returns a value derived from its input.
func (w *workload) Work(ctx context.Context, in WorkInput) (int64, error) {
	started := time.Now()
	if !sleepCtx(ctx, time.Duration(in.DurationMS)*time.Millisecond) {
		return 0, ctx.Err()
	}
	if activity.GetInfo(ctx).Attempt <= in.FailTimes {
		return 0, errTransient
	}
	if err := w.record(ctx, "work", started, in.Gen); err != nil {
		return 0, err
	}
	return workValue(in), nil
}

// Work2 is Work under another name, returning another value: the new
// branch of Versioned.
func (w *workload) Work2(ctx context.Context, in WorkInput) (int64, error) {
	v, err := w.Work(ctx, in)
	if err != nil {
		return 0, err
	}
	return v + work2Extra, nil
}

// BeatInput is the input of the heartbeating activity.
type BeatInput struct {
	Seq        int `json:"seq"`
	DurationMS int `json:"duration_ms"`
}

// BeatProgress is the heartbeating activity's heartbeat: which attempt, in
// which process, sent it. The checker compares it with the claim that held
// the task when the database accepted it.
type BeatProgress struct {
	Attempt int `json:"attempt"`
	PID     int `json:"pid"`
	N       int `json:"n"`
}

// Beat runs for a while, heartbeating, and stops when a heartbeat says the
// task was claimed again.
func (w *workload) Beat(ctx context.Context, in BeatInput) (int64, error) {
	started := time.Now()
	end := started.Add(time.Duration(in.DurationMS) * time.Millisecond)
	attempt := activity.GetInfo(ctx).Attempt
	for i := 0; time.Now().Before(end); i++ {
		if err := activity.RecordHeartbeat(ctx, BeatProgress{Attempt: attempt, PID: w.pid, N: i}); err != nil {
			return 0, err // the engine logs a refused heartbeat (msgHeartbeatRefused)
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
			return 0, ctx.Err()
		}
	}
	if err := w.record(ctx, "beat", started, 0); err != nil {
		return 0, err
	}
	return beatValue(in.Seq), nil
}

// Effect applies an effect with the engine's exactly-once helper: the
// effects table has no unique key, so an effect applied twice would show.
// Each delivery is also recorded in the ledger, after the helper returns.
func (w *workload) Effect(ctx context.Context, seq int) (int64, error) {
	started := time.Now()
	info := activity.GetInfo(ctx)
	v, err := engine.ExactlyOnce(ctx, w.pool, func(ctx context.Context, tx pgx.Tx) (int64, error) {
		_, err := tx.Exec(ctx, insertEffectSQL, info.IdempotencyKey, w.pid)
		return effectValue(seq), err
	})
	if err != nil {
		w.logWriteFailure(ctx, "exactly-once effect", err)
		return 0, err
	}
	if err := w.record(ctx, "effect", started, 0); err != nil {
		return 0, err
	}
	return v, nil
}

const (
	insertLedgerSQL = `
INSERT INTO chaos_ledger (kind, idempotency_key, run_id, workflow_id, attempt, pid, started_at, gen)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`
	insertEffectSQL = `INSERT INTO chaos_effects (idempotency_key, pid) VALUES ($1, $2)`
)

// record writes one row to the ledger for this execution, without any
// deduplication: the row is the activity's side effect. gen is the code
// generation that scheduled it (WorkInput.Gen).
func (w *workload) record(ctx context.Context, kind string, started time.Time, gen int) error {
	info := activity.GetInfo(ctx)
	_, err := w.pool.Exec(ctx, insertLedgerSQL, kind, info.IdempotencyKey, info.RunID, info.WorkflowID, info.Attempt, w.pid, started, gen)
	if err != nil {
		w.logWriteFailure(ctx, "ledger", err)
		return fmt.Errorf("write the ledger: %w", err)
	}
	return nil
}

// msgWriteFailed is what the activities log when a write failed, and may
// have committed all the same, so a second execution is explained.
// msgHeartbeatRefused is the engine's line for a heartbeat that fencing
// refused (the task was claimed again).
const (
	msgWriteFailed      = "chaos: activity write failed"
	msgHeartbeatRefused = "heartbeat refused: the task was claimed again; this attempt stops"
)

func (w *workload) logWriteFailure(ctx context.Context, what string, err error) {
	info := activity.GetInfo(ctx)
	w.log.LogAttrs(ctx, slog.LevelWarn, msgWriteFailed, slog.String("write", what), slog.String("key", info.IdempotencyKey),
		slog.Int("attempt", info.Attempt), slog.String("error", err.Error()))
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// register registers the workload on e. lease is the activities'
// start-to-close (and Beat's heartbeat) timeout.
func (w *workload) register(e engine.Registrar) error {
	retry := activity.RetryPolicy{
		InitialInterval: 50 * time.Millisecond, BackoffCoefficient: 2, MaximumInterval: 500 * time.Millisecond,
		MaximumAttempts: 1000,
	}
	failRetry := retry
	failRetry.MaximumAttempts = 2
	return errors.Join(
		engine.RegisterWorkflow(e, w.Flow, engine.WorkflowOptions{Name: flowName}),
		engine.RegisterWorkflow(e, w.Drain, engine.WorkflowOptions{Name: drainName}),
		engine.RegisterWorkflow(e, w.Fail, engine.WorkflowOptions{Name: failName}),
		engine.RegisterWorkflow(e, w.Spin, engine.WorkflowOptions{Name: spinName}),
		engine.RegisterWorkflow(e, w.Versioned, engine.WorkflowOptions{Name: versionedName}),
		engine.RegisterActivity(e, w.Work, activity.Options{Name: workName, StartToCloseTimeout: w.lease, Retry: retry}),
		engine.RegisterActivity(e, w.Work2, activity.Options{Name: work2Name, StartToCloseTimeout: w.lease, Retry: retry}),
		engine.RegisterActivity(e, w.Beat, activity.Options{Name: beatName, HeartbeatTimeout: w.lease, StartToCloseTimeout: 10 * w.lease, Retry: retry}),
		engine.RegisterActivity(e, w.Effect, activity.Options{Name: effectName, StartToCloseTimeout: w.lease, Retry: retry}),
		engine.RegisterActivity(e, w.FailActivity, activity.Options{Name: failActName, StartToCloseTimeout: w.lease, Retry: failRetry}),
	)
}

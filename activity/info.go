package activity

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/durable-go/durable/internal/actctx"
)

// Info describes the activity attempt running in ctx.
type Info struct {
	// Name is the name the activity was registered under.
	Name string
	// IdempotencyKey is the same for every attempt and redelivery of one
	// scheduled activity, and differs between two scheduled activities. Pass it
	// to the services the activity calls so that a repeated attempt has no
	// second effect.
	IdempotencyKey string
	// Attempt is the number of this attempt, starting at 1.
	Attempt int
	// Queue is the queue the attempt was taken from.
	Queue string
	// WorkflowID is the ID of the workflow that scheduled the activity; it is
	// empty for standalone jobs.
	WorkflowID string
	// RunID is the run of that workflow; it is empty for standalone jobs.
	RunID string
	// Seq numbers the activity among the commands of its run; with RunID it
	// identifies the activity (Temporal's ActivityID). It is 0 for
	// standalone jobs.
	Seq int64
	// ScheduledTime is when the activity was scheduled or the job enqueued.
	ScheduledTime time.Time
	// StartedTime is when this attempt started.
	StartedTime time.Time
	// Deadline is when this attempt's lease or timeout ends.
	Deadline time.Time
	// HeartbeatDetails holds the JSON details of the last heartbeat recorded
	// by an earlier attempt, or nil if there was none. Decode it with
	// [encoding/json.Unmarshal] to resume where that attempt stopped.
	HeartbeatDetails []byte
	// TaskToken names this attempt to the process that completes it later
	// (see [ErrResultPending]): an opaque, printable string of bytes. It
	// stops working once the attempt is completed, failed or timed out.
	TaskToken []byte
}

type (
	infoKey   struct{}
	loggerKey struct{}
)

// GetInfo returns the [Info] of the activity attempt running in ctx. It returns
// the zero Info when ctx is not an activity context.
func GetInfo(ctx context.Context) Info {
	info, _ := ctx.Value(infoKey{}).(Info)
	return info
}

// NewContext returns a copy of ctx that carries info, so that [GetInfo] returns
// it. The engine calls it for every attempt; unit tests of activities call it to
// run an activity function directly with the Info they need.
//
// NewContext sets no deadline on the returned context: info.Deadline is only
// reported, and a caller that wants ctx to end then uses
// [context.WithDeadline] as well.
func NewContext(ctx context.Context, info Info) context.Context {
	return context.WithValue(ctx, infoKey{}, info)
}

// RecordHeartbeat reports that the activity running in ctx is alive and makes
// progress. details is encoded as JSON and handed to the next attempt as
// [Info.HeartbeatDetails] if this one fails; pass nil when there is nothing to
// resume from.
//
// RecordHeartbeat returns an error if details cannot be encoded or if the
// engine refused the heartbeat, which it does when the attempt's lease was lost
// (another worker may run the activity now) or when the workflow canceled the
// activity or closed (the error wraps [ErrCanceled], and ctx is canceled with
// it as its cause). Either way the attempt should stop and return the error.
// Outside an engine (in a unit test that calls the activity function
// directly) RecordHeartbeat only checks that details encode.
func RecordHeartbeat(ctx context.Context, details any) error {
	b, err := json.Marshal(details)
	if err != nil {
		return fmt.Errorf("record heartbeat: encode details: %w", err)
	}
	fn := actctx.Heartbeat(ctx)
	if fn == nil {
		return nil
	}
	if err := fn(ctx, b); err != nil {
		return fmt.Errorf("record heartbeat: %w", err)
	}
	return nil
}

// Logger returns the logger for the activity attempt running in ctx: the
// engine's logger (engine.Options.Logger) with the attributes activity,
// attempt, run_id, workflow_id and idempotency_key of [GetInfo] (the empty
// ones left out). Outside an engine, without a logger installed by
// [WithLogger], it is [slog.Default] with those attributes ctx has.
func Logger(ctx context.Context) *slog.Logger {
	l, _ := ctx.Value(loggerKey{}).(*slog.Logger)
	if l == nil {
		l = slog.Default()
	}
	info := GetInfo(ctx)
	attrs := make([]any, 0, 5)
	if info.Name != "" {
		attrs = append(attrs, slog.String("activity", info.Name))
	}
	if info.Attempt != 0 {
		attrs = append(attrs, slog.Int("attempt", info.Attempt))
	}
	if info.RunID != "" {
		attrs = append(attrs, slog.String("run_id", info.RunID))
	}
	if info.WorkflowID != "" {
		attrs = append(attrs, slog.String("workflow_id", info.WorkflowID))
	}
	if info.IdempotencyKey != "" {
		attrs = append(attrs, slog.String("idempotency_key", info.IdempotencyKey))
	}
	if len(attrs) == 0 {
		return l
	}
	return l.With(attrs...)
}

// WithLogger returns a copy of ctx in which [Logger] starts from l instead
// of [slog.Default]. The engine installs its logger for every attempt; unit
// tests of activities call it to capture what an activity logs. A nil l
// means slog.Default again.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

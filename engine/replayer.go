package engine

import (
	"context"
	"log/slog"
	"time"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/history"
)

// ReplayerOptions configure a Replayer. Set them as the engines that
// recorded the histories were set. The zero value works for engines that
// ran with the defaults.
type ReplayerOptions struct {
	// Codec decodes the payloads the engines stored encoded
	// (Options.Codec). Default: none; payloads are plain JSON.
	Codec codec.PayloadCodec
	// Logger receives the replayer's logs. The workflow's own log lines are
	// dropped while replaying (ReplayTrace reports them as TraceLog steps).
	// Default slog.Default().
	Logger *slog.Logger
	// WorkflowDeadlockTimeout bounds how long workflow code may run without
	// yielding, as Options.WorkflowDeadlockTimeout does. Negative turns the
	// bound off, for stepping through a replay in a debugger. Default 1s.
	WorkflowDeadlockTimeout time.Duration
	// MaxPayloadBytes is the largest workflow result accepted, encoded, as
	// Options.MaxPayloadBytes: a result over it fails the run, in a replay
	// as it did when the history was recorded. Default 2 MiB.
	MaxPayloadBytes int
}

// Replayer replays recorded workflow histories against the workflow code
// registered on it, with no database: in tests, with histories exported from
// production (history.Export), before deploying changed workflow code; and
// in tools such as durablecli's replay trace. Register the workflows (and
// the activities whose registered names or options differ from their
// functions' names and the defaults) with RegisterWorkflow and
// RegisterActivity, as on the engines that recorded the histories. Every
// method is safe for concurrent use.
//
// An Engine replays too (Engine.Replay), and replays the runs of its
// database (Engine.ReplayRun, Engine.CheckOpenRuns).
type Replayer struct {
	e *Engine
}

// NewReplayer returns a replayer with nothing registered.
func NewReplayer(o ReplayerOptions) (*Replayer, error) {
	opts := Options{
		Codec: o.Codec, Logger: o.Logger,
		WorkflowDeadlockTimeout: o.WorkflowDeadlockTimeout, MaxPayloadBytes: o.MaxPayloadBytes,
	}
	if err := opts.validate(); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	e := newRegistry(opts, 0)
	e.nowFunc = opts.osNowFunc // a replay compares no times with a database
	return &Replayer{e: e}, nil
}

func (r *Replayer) registry() *Engine { return r.e }

// Replay runs the workflow code registered on r against h. It returns nil
// when the code reproduces the history, or the first divergence as a
// *workflow.NonDeterminismError naming the event, what history recorded,
// what the code did and where. See Engine.Replay for how a history's end is
// compared.
func (r *Replayer) Replay(ctx context.Context, h history.History) error {
	return r.e.Replay(ctx, h)
}

// ReplayTrace replays h like Replay, calling fn for each step, and stops
// after event until (0: the whole history). It returns what the run waits
// for at that point: its open activities, timers, children and untaken
// signals. A divergence ends the trace with the replayer's error.
func (r *Replayer) ReplayTrace(ctx context.Context, h history.History, until int64, fn func(TraceStep)) ([]string, error) {
	return r.e.ReplayTrace(ctx, h, until, fn)
}

package workflow

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/durable-go/durable/activity"
)

// Context is what workflow code gets instead of a context.Context. It gives
// access to the run's deterministic clock, logger and options, and is passed
// to every workflow API call.
//
// It deliberately does not implement context.Context: an activity function
// (which takes a context.Context) cannot be called directly from workflow
// code, only through [ExecuteActivity]. Contexts are values; derive new ones
// with [WithActivityOptions].
type Context struct {
	x  *executor
	ao *activity.Options
	// detached contexts are not affected by the run's cancellation.
	detached bool
}

func (c Context) exec() *executor {
	if c.x == nil {
		panic("workflow: zero Context; use the Context passed to the workflow function")
	}
	return c.x
}

// WithActivityOptions returns a Context whose activity calls use o. Zero fields
// of o keep the options the activity was registered with.
func WithActivityOptions(ctx Context, o activity.Options) Context {
	ctx.exec()
	ctx.ao = &o
	return ctx
}

// NewDisconnectedContext returns a Context that the run's cancellation does
// not affect: activities and timers started on it run to the end. Use it for
// cleanup after the run was canceled.
func NewDisconnectedContext(ctx Context) Context {
	ctx.exec()
	ctx.detached = true
	return ctx
}

// IsCanceled reports whether cancellation of the run was requested (and ctx
// is not disconnected from it).
func IsCanceled(ctx Context) bool {
	return ctx.exec().cancelRequested && !ctx.detached
}

// Now returns the workflow's current time: the time recorded in history for
// the event being processed. It is the same on every replay.
func Now(ctx Context) time.Time {
	return ctx.exec().now
}

// IsReplaying reports whether the code is re-running events that an earlier
// workflow task already processed.
func IsReplaying(ctx Context) bool {
	return ctx.exec().replaying
}

// Info describes the running workflow.
type Info struct {
	WorkflowID   string
	RunID        string
	WorkflowType string
}

// GetInfo returns information about the running workflow.
func GetInfo(ctx Context) Info {
	x := ctx.exec()
	return Info{WorkflowID: x.opts.WorkflowID, RunID: x.opts.RunID, WorkflowType: x.opts.WorkflowType}
}

// Logger returns a logger that carries the run's identity and drops every
// record while the workflow is replaying, so each line is logged once.
func Logger(ctx Context) *slog.Logger {
	return ctx.exec().logger
}

// replayHandler drops records while the executor replays.
type replayHandler struct {
	inner slog.Handler
	x     *executor
}

func (h *replayHandler) Enabled(ctx context.Context, l slog.Level) bool {
	if h.x.opts.Trace != nil {
		return true
	}
	return !h.x.replaying && h.inner.Enabled(ctx, l)
}

func (h *replayHandler) Handle(ctx context.Context, r slog.Record) error {
	if t := h.x.opts.Trace; t != nil {
		var b strings.Builder
		b.WriteString(r.Level.String() + " " + r.Message)
		r.Attrs(func(a slog.Attr) bool {
			b.WriteString(" " + a.String())
			return true
		})
		t(h.x.current, "log", b.String())
	}
	if h.x.replaying {
		return nil
	}
	if h.x.holdLogs {
		h.x.heldLogs = append(h.x.heldLogs, heldLine{ctx: ctx, h: h.inner, r: r.Clone()})
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *replayHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &replayHandler{inner: h.inner.WithAttrs(as), x: h.x}
}

func (h *replayHandler) WithGroup(name string) slog.Handler {
	return &replayHandler{inner: h.inner.WithGroup(name), x: h.x}
}

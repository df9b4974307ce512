// Package actctx carries what the engine hands to activity code on an
// attempt's context.Context and what the activity package reads back: the
// function that receives heartbeats. It is the engine's side of
// activity.RecordHeartbeat, kept out of the activity package's public API.
package actctx

import "context"

type heartbeatKey struct{}

// HeartbeatFunc receives the JSON-encoded details of a heartbeat recorded
// with activity.RecordHeartbeat, with the context passed to it, on the
// goroutine that called it. It returns an error to refuse the heartbeat.
type HeartbeatFunc func(ctx context.Context, details []byte) error

// WithHeartbeatFunc returns a copy of ctx in which activity.RecordHeartbeat
// calls fn. A nil fn makes RecordHeartbeat a no-op again.
func WithHeartbeatFunc(ctx context.Context, fn HeartbeatFunc) context.Context {
	return context.WithValue(ctx, heartbeatKey{}, fn)
}

// Heartbeat returns the function installed in ctx by WithHeartbeatFunc, or
// nil if there is none.
func Heartbeat(ctx context.Context) HeartbeatFunc {
	fn, _ := ctx.Value(heartbeatKey{}).(HeartbeatFunc)
	return fn
}

// Package workflow is a stub of github.com/durable-go/durable/workflow with
// the signatures the analyzer's fixtures use.
package workflow

import (
	"context"
	"log/slog"
	"time"
)

type Context struct{}

func Now(ctx Context) time.Time                { return time.Time{} }
func Sleep(ctx Context, d time.Duration) error { return nil }
func Logger(ctx Context) *slog.Logger          { return slog.Default() }

type future struct{}

type Future[T any] interface {
	Get(ctx Context) (T, error)
	IsReady() bool
	state() *future
}

type AnyFuture interface {
	IsReady() bool
	state() *future
}

func ExecuteActivity[In, Out any](ctx Context, fn func(context.Context, In) (Out, error), in In) Future[Out] {
	return nil
}

func SideEffect[T any](ctx Context, fn func() T) T { return fn() }

type Timer struct{}

func NewTimer(ctx Context, d time.Duration) *Timer { return &Timer{} }
func (t *Timer) IsReady() bool                     { return false }
func (t *Timer) state() *future                    { return nil }
func (t *Timer) Get(ctx Context) (struct{}, error) { return struct{}{}, nil }
func (t *Timer) Cancel()                           {}
func Go(ctx Context, fn func(ctx Context))         {}
func Await(ctx Context, cond func() bool) error    { return nil }

type Channel[T any] struct{}

func NewChannel[T any](ctx Context) *Channel[T]          { return &Channel[T]{} }
func (c *Channel[T]) Send(ctx Context, v T)              {}
func (c *Channel[T]) Receive(ctx Context) (v T, ok bool) { return v, false }
func (c *Channel[T]) IsReady() bool                      { return false }
func (c *Channel[T]) receivable()                        {}

type AnyChannel interface {
	IsReady() bool
	receivable()
}

type Selector struct{}

func NewSelector(ctx Context) *Selector                           { return &Selector{} }
func (s *Selector) AddFuture(f AnyFuture, fn func()) *Selector    { return s }
func (s *Selector) AddReceive(ch AnyChannel, fn func()) *Selector { return s }
func (s *Selector) Select(ctx Context)                            {}

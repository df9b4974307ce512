// Package engine is a stub of github.com/durable-go/durable/engine with the
// signatures the analyzer's fixtures use.
package engine

import (
	"context"

	"github.com/durable-go/durable/workflow"
)

type Engine struct{}

type WorkflowOptions struct {
	Name  string
	Queue string
}

type ActivityOptions struct{ Name string }

func RegisterWorkflow[In, Out any](e *Engine, fn func(workflow.Context, In) (Out, error), o WorkflowOptions) error {
	return nil
}

func RegisterActivity[In, Out any](e *Engine, fn func(context.Context, In) (Out, error), o ActivityOptions) error {
	return nil
}

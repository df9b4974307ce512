package bad

import (
	"time"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
)

type biller struct{}

// Charge is a method, so only its registration makes it a workflow.
func (b *biller) Charge(ctx workflow.Context, cents int) (int, error) {
	time.Sleep(time.Second) // want `\(reached from workflow biller\.Charge\)$`
	return cents, nil
}

// sleepy names workflow.Context through an alias; it is found by its
// signature, and its registration under another name changes nothing.
func sleepy(ctx wctx, in int) (int, error) {
	<-time.After(time.Second) // want `time\.After .*\(reached from workflow sleepy\)$` `channel receive`
	return in, nil
}

type wctx = workflow.Context

func register(e *engine.Engine) {
	b := &biller{}
	_ = engine.RegisterWorkflow(e, b.Charge, engine.WorkflowOptions{})
	_ = engine.RegisterWorkflow(e, sleepy, engine.WorkflowOptions{Name: "Sleepy"})
	_ = engine.RegisterWorkflow(e, func(ctx workflow.Context, in int) (int, error) {
		go func() {}() // want `^go statement in workflow code: use workflow\.Go\(ctx, fn\) \(reached from workflow Literal\)$`
		return in, nil
	}, engine.WorkflowOptions{Name: "Literal"})
	_ = engine.RegisterWorkflow(e, func(ctx workflow.Context, in int) (int, error) {
		return in + time.Now().Second(), nil // want `\(reached from workflow func literal at register\.go:35\)$`
	}, engine.WorkflowOptions{})
}

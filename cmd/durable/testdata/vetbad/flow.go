// Package vetbad is a workflow that durable vet must report.
package vetbad

import (
	"time"

	"github.com/durable-go/durable/workflow"
)

// Late reads the wall clock in workflow code.
func Late(ctx workflow.Context, _ int) (int64, error) {
	return time.Now().Unix(), nil
}

package engine_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/store"
)

// The public constants spell the values the store writes and reads: the
// engine converts between them by value, so they must not drift apart.
func TestStatusAndKindsMatchTheStore(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		engine string
		store  string
	}{
		{"StatusRunning", string(engine.StatusRunning), store.StatusRunning},
		{"StatusCompleted", string(engine.StatusCompleted), store.StatusCompleted},
		{"StatusFailed", string(engine.StatusFailed), store.StatusFailed},
		{"StatusCanceled", string(engine.StatusCanceled), store.StatusCanceled},
		{"StatusTerminated", string(engine.StatusTerminated), store.StatusTerminated},
		{"StatusContinuedAsNew", string(engine.StatusContinuedAsNew), store.StatusContinuedAsNew},
		{"DeadJob", string(engine.DeadJob), store.DeadJob},
		{"DeadWorkflow", string(engine.DeadWorkflow), store.DeadWorkflow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.store, tt.engine)
		})
	}
}

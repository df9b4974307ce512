package store

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
)

// A redrive cuts at the activity failure the workflow gave up on, else at
// the workflow's failure.
func TestRedriveCut(t *testing.T) {
	ev := func(id int64, a history.Attributes) history.Event { return history.Event{ID: id, Attributes: a} }
	gaveUp := history.ActivityFailed{Seq: 2}
	tests := []struct {
		name       string
		events     []history.Event
		cut        int64
		wantFailed bool
	}{
		{"gave up on an activity", []history.Event{ev(1, history.WorkflowStarted{}), ev(2, history.ActivityScheduled{Seq: 2}),
			ev(3, gaveUp), ev(4, history.WorkflowFailed{})}, 3, true},
		{"moved past a failure, then failed", []history.Event{ev(1, history.WorkflowStarted{}), ev(2, history.ActivityScheduled{Seq: 2}),
			ev(3, gaveUp), ev(4, history.TimerStarted{Seq: 3}), ev(5, history.WorkflowFailed{})}, 5, false},
		{"no activity", []history.Event{ev(1, history.WorkflowStarted{}), ev(2, history.WorkflowFailed{})}, 2, false},
	}
	for _, tt := range tests {
		cut, failed := RedriveCut(tt.events)
		require.Equal(t, tt.cut, cut, tt.name)
		require.Equal(t, tt.wantFailed, failed != nil, tt.name)
		if failed != nil {
			require.Equal(t, gaveUp, *failed, tt.name)
		}
	}
}

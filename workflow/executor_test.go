package workflow_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/workflow"
)

// testRun runs workflow code in memory, in the role of the engine: it feeds
// the executor events and records the commands the code gives as the
// events that follow.
type testRun struct {
	t    *testing.T
	x    wfexec.Executor
	now  time.Time
	evs  []history.Event
	cmds []history.Attributes // given by the code, not yet in history
}

// newTestRun starts fn, whose result is JSON-encoded, and returns the
// commands of its first workflow task.
func newTestRun[Out any](t *testing.T, fn func(workflow.Context) (Out, error)) (*testRun, []history.Attributes) {
	t.Helper()
	r := &testRun{t: t, now: time.Date(2026, 12, 3, 9, 0, 0, 0, time.UTC)}
	r.x = wfexec.New(wfexec.Options{
		RunID: fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano()), WorkflowType: t.Name(),
		Func: func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
			out, err := fn(ctx)
			if err != nil {
				return nil, err
			}
			return json.Marshal(out)
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	t.Cleanup(r.x.Close)
	return r, r.deliver(history.WorkflowStarted{WorkflowType: t.Name(), Input: json.RawMessage(`null`), Format: history.FormatTasks})
}

// deliver records the commands of the last task, then the given events,
// applies them, and returns the commands the code gave. Each call's events
// are a minute after the last call's.
func (r *testRun) deliver(events ...history.Attributes) []history.Attributes {
	r.t.Helper()
	var batch []history.Event
	add := func(a history.Attributes) {
		e := history.Event{ID: int64(len(r.evs)) + 1, Time: r.now, Attributes: a}
		r.evs = append(r.evs, e)
		batch = append(batch, e)
	}
	for _, c := range r.cmds {
		add(c)
	}
	for _, e := range events {
		add(e)
	}
	r.now = r.now.Add(time.Minute)
	require.NoError(r.t, r.x.Apply(batch, 0))
	r.cmds = r.x.TakeCommands()
	return r.cmds
}

// result returns the JSON result of a run whose last task completed it.
func (r *testRun) result(cmds []history.Attributes) string {
	r.t.Helper()
	require.NotEmpty(r.t, cmds)
	done, ok := cmds[len(cmds)-1].(history.WorkflowCompleted)
	require.True(r.t, ok, "the run completed: last command is %#v", cmds[len(cmds)-1])
	return string(done.Result)
}

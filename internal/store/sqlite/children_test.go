package sqlite_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// family drives a parent run and its children on one store, at one time.
type family struct {
	t   *testing.T
	s   *sqlite.Store
	now time.Time
}

// claim claims the workflow tasks of queue at f.now plus after, by run ID.
func (f *family) claim(queue string, after time.Duration) map[string]store.WorkflowTask {
	f.t.Helper()
	tasks, err := f.s.ClaimWorkflowTasks(f.t.Context(), store.ClaimParams{
		Queue: queue, WorkerID: "w", Limit: 100, Now: f.now.Add(after), Lease: time.Minute,
	})
	require.NoError(f.t, err)
	byRun := map[string]store.WorkflowTask{}
	for _, wt := range tasks {
		byRun[wt.RunID] = wt
	}
	return byRun
}

// claimOne claims the one workflow task of run on queue.
func (f *family) claimOne(queue, runID string) store.WorkflowTask {
	f.t.Helper()
	tasks := f.claim(queue, 0)
	require.Contains(f.t, tasks, runID, "a workflow task of run %s on %s", runID, queue)
	return tasks[runID]
}

// commit commits c, which must go through.
func (f *family) commit(c store.CommitWorkflowTaskParams) store.Ready {
	f.t.Helper()
	c.Now = f.now
	ready, err := f.s.CommitWorkflowTask(f.t.Context(), c)
	require.NoError(f.t, err)
	return ready
}

// last is the run's last event ID.
func (f *family) last(runID string) int64 {
	f.t.Helper()
	run, err := f.s.GetRun(f.t.Context(), runID)
	require.NoError(f.t, err)
	return run.LastEventID
}

// events returns the run's events after event after.
func (f *family) events(runID string, after int64) []history.Event {
	f.t.Helper()
	events, err := f.s.ListEvents(f.t.Context(), runID, after)
	require.NoError(f.t, err)
	return events
}

// status returns the run's status.
func (f *family) status(runID string) string {
	f.t.Helper()
	run, err := f.s.GetRun(f.t.Context(), runID)
	require.NoError(f.t, err)
	return run.Status
}

// types returns the types of events.
func types(events []history.Event) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = e.Type()
	}
	return out
}

// A parent starts children (one whose workflow ID is taken fails at once),
// signals runs outside its family, hears of its children's ends (a child
// that continues as new says nothing; its continuation is still the
// parent's), and closes: its children go as their policies say.
func TestChildrenReportToTheirParentAndFollowItsClose(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	f := &family{t: t, s: open(t), now: time.Date(2030, time.January, 2, 3, 4, 5, 6000, time.UTC)}

	// "taken" has an open run, with no workflow task.
	taken := createRun(t, f.s, "taken", "other", false)
	f.commit(store.CommitWorkflowTaskParams{RunID: taken.RunID, Token: f.claimOne("other", taken.RunID).Token, ProcessedEventID: 1})

	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	parent, err := f.s.CreateRun(ctx, store.CreateRunParams{
		RunID: uuid.NewString(), WorkflowID: "parent", WorkflowType: "P", Queue: "pq", Input: json.RawMessage(`1`),
		Now: f.now, TraceContext: trace,
	})
	require.NoError(t, err)
	policies := map[string]string{"term": "terminate", "cancel": "cancel", "abandon": "abandon", "done": "terminate", "killed": "terminate"}
	names := []string{"term", "cancel", "abandon", "done", "killed", "taken"}
	children := map[string]string{} // run IDs by name
	start := store.CommitWorkflowTaskParams{RunID: parent.RunID, Token: f.claimOne("pq", parent.RunID).Token, ProcessedEventID: 1}
	for i, name := range names {
		workflowID := "child-" + name
		policy := policies[name]
		if name == "taken" {
			workflowID, policy = "taken", "terminate"
		}
		c := store.NewChild{
			Seq: int64(i + 1), RunID: uuid.NewString(), WorkflowID: workflowID, WorkflowType: "C", Queue: "cq",
			Input: json.RawMessage(fmt.Sprintf(`{"child":%q}`, name)), ParentClosePolicy: policy,
		}
		children[name] = c.RunID
		start.Events = append(start.Events, history.ChildWorkflowScheduled{
			Seq: c.Seq, WorkflowType: c.WorkflowType, WorkflowID: c.WorkflowID, RunID: c.RunID, Queue: c.Queue,
			Input: c.Input, ParentClosePolicy: c.ParentClosePolicy,
		})
		start.Children = append(start.Children, c)
	}
	ready := f.commit(start)
	require.Equal(t, []string{"cq", "pq"}, ready.WorkflowQueues, "the children's tasks, and the parent's for their starts")
	started := f.events(parent.RunID, 7)
	require.Equal(t, []string{"child_workflow_started", "child_workflow_started", "child_workflow_started",
		"child_workflow_started", "child_workflow_started", "child_workflow_failed"}, types(started))
	require.Equal(t, history.ChildWorkflowStarted{Seq: 1, RunID: children["term"]}, started[0].Attributes)
	failed, ok := started[5].Attributes.(history.ChildWorkflowFailed)
	require.True(t, ok)
	require.Equal(t, int64(6), failed.Seq)
	require.Equal(t, "already_running", failed.Failure.Class)
	_, err = f.s.GetRun(ctx, children["taken"])
	require.ErrorIs(t, err, store.ErrNotFound, "the child whose workflow ID was taken did not start")

	childTasks := f.claim("cq", 0)
	require.Len(t, childTasks, 5)
	for _, name := range names[:5] {
		wt := childTasks[children[name]]
		require.Equal(t, parent.RunID, wt.ParentRunID, name)
		require.Equal(t, trace, wt.TraceContext, "%s: a child is in its parent's trace", name)
		require.Len(t, wt.Events, 1, name)
		require.JSONEq(t, fmt.Sprintf(`{"child":%q}`, name), string(wt.Events[0].Attributes.(history.WorkflowStarted).Input), name)
	}

	// Signals outside the family: one reaches its run, one finds none.
	last := f.last(parent.RunID)
	ready = f.commit(store.CommitWorkflowTaskParams{
		RunID: parent.RunID, Token: f.claimOne("pq", parent.RunID).Token, ProcessedEventID: last,
		Events: []history.Attributes{
			history.ExternalSignalScheduled{Seq: 7, WorkflowID: "taken", Name: "ping", Payload: json.RawMessage(`1`)},
			history.ExternalSignalScheduled{Seq: 8, WorkflowID: "nobody", Name: "ping", Payload: json.RawMessage(`1`)},
		},
		External: []store.ExternalRequest{
			{Seq: 7, WorkflowID: "taken", Event: history.SignalReceived{Name: "ping", Payload: json.RawMessage(`1`)}},
			{Seq: 8, WorkflowID: "nobody", Event: history.SignalReceived{Name: "ping", Payload: json.RawMessage(`1`)}},
		},
	})
	require.Equal(t, []string{"other", "pq"}, ready.WorkflowQueues)
	outcomes := f.events(parent.RunID, last+2)
	require.Equal(t, []string{"external_request_completed", "external_request_failed"}, types(outcomes))
	require.Equal(t, history.ExternalRequestCompleted{Seq: 7}, outcomes[0].Attributes)
	require.Equal(t, "not_found", outcomes[1].Attributes.(history.ExternalRequestFailed).Failure.Class)
	require.Equal(t, []string{"workflow_started", "signal_received"}, types(f.events(taken.RunID, 0)))

	// The children end: one completes, one continues as new, one is
	// terminated.
	last = f.last(parent.RunID)
	done := childTasks[children["done"]]
	f.commit(store.CommitWorkflowTaskParams{
		RunID: done.RunID, Token: done.Token, ProcessedEventID: 1, ParentRunID: parent.RunID,
		Events: []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"four"`)}},
		Close:  &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"four"`)},
	})
	cancel, next := childTasks[children["cancel"]], uuid.NewString()
	f.commit(store.CommitWorkflowTaskParams{
		RunID: cancel.RunID, Token: cancel.Token, ProcessedEventID: 1, ParentRunID: parent.RunID,
		Events:     []history.Attributes{history.WorkflowContinuedAsNew{Input: json.RawMessage(`2`), NewRunID: next}},
		Close:      &store.CloseRun{Status: store.StatusContinuedAsNew},
		ContinueAs: &store.NewRun{RunID: next, Input: json.RawMessage(`2`)},
	})
	_, err = f.s.TerminateRun(ctx, store.TerminateParams{WorkflowID: "child-killed", Reason: "stop", Now: f.now})
	require.NoError(t, err)
	reports := f.events(parent.RunID, last)
	require.Len(t, reports, 2, "the continued child reports nothing: %v", types(reports))
	require.Equal(t, history.ChildWorkflowCompleted{Seq: 4, Result: json.RawMessage(`"four"`)}, reports[0].Attributes)
	require.Equal(t, history.ChildWorkflowFailed{Seq: 5, Failure: history.Failure{Message: "terminated: stop", Class: "terminated"}},
		reports[1].Attributes)
	continued := f.claimOne("cq", next)
	require.Equal(t, parent.RunID, continued.ParentRunID, "the continuation is the parent's child")

	// The parent closes.
	ready = f.commit(store.CommitWorkflowTaskParams{
		RunID: parent.RunID, Token: f.claimOne("pq", parent.RunID).Token, ProcessedEventID: f.last(parent.RunID),
		CloseChildren: true,
		Events:        []history.Attributes{history.WorkflowCompleted{Result: json.RawMessage(`"parent"`)}},
		Close:         &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"parent"`)},
	})
	require.Equal(t, parent.RunID, ready.ClosedRun)
	require.Equal(t, store.StatusCompleted, f.status(parent.RunID))
	require.Equal(t, store.StatusTerminated, f.status(children["term"]), "policy terminate")
	require.Equal(t, []string{"workflow_started", "workflow_terminated"}, types(f.events(children["term"], 0)))
	require.Equal(t, []string{"workflow_started", "workflow_cancel_requested"}, types(f.events(next, 0)), "policy cancel")
	require.Equal(t, store.StatusRunning, f.status(next))
	require.Equal(t, store.StatusRunning, f.status(children["abandon"]), "policy abandon")
	require.Equal(t, []string{"workflow_started"}, types(f.events(children["abandon"], 0)))
	require.Equal(t, store.StatusCompleted, f.status(children["done"]))
	require.Equal(t, store.StatusTerminated, f.status(children["killed"]))
	require.Equal(t, store.StatusContinuedAsNew, f.status(children["cancel"]))

	later := f.claim("cq", time.Hour) // every lease has run out
	require.Len(t, later, 2, "only the open children have tasks")
	require.Contains(t, later, next)
	require.Contains(t, later, children["abandon"])
}

package workflow_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/workflow"
)

func TestSelectorCaseTypes(t *testing.T) {
	t.Parallel()
	anyFuture := reflect.TypeFor[workflow.AnyFuture]()
	anyChannel := reflect.TypeFor[workflow.AnyChannel]()
	for _, tt := range []struct {
		name   string
		typ    reflect.Type
		future bool // AddFuture takes it; otherwise AddReceive does
	}{
		{name: "Future", typ: reflect.TypeFor[workflow.Future[int]](), future: true},
		{name: "Timer", typ: reflect.TypeFor[*workflow.Timer](), future: true},
		{name: "ChildWorkflowFuture", typ: reflect.TypeFor[workflow.ChildWorkflowFuture[string]](), future: true},
		{name: "Channel", typ: reflect.TypeFor[*workflow.Channel[int]]()},
		{name: "SignalChannel", typ: reflect.TypeFor[workflow.SignalChannel[string]]()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.future, tt.typ.Implements(anyFuture), "AddFuture accepts %s", tt.typ)
			require.Equal(t, !tt.future, tt.typ.Implements(anyChannel), "AddReceive accepts %s", tt.typ)
		})
	}
}

func TestSelectorFiresReadyCases(t *testing.T) {
	t.Parallel()
	r, cmds := newTestRun(t, func(ctx workflow.Context) ([]string, error) {
		ch := workflow.NewBufferedChannel[string](ctx, 1)
		approvals := workflow.GetSignalChannel[string](ctx, "approve")
		deadline := workflow.NewTimer(ctx, time.Hour)
		workflow.Go(ctx, func(ctx workflow.Context) { ch.Send(ctx, "sent") })
		var got []string
		s := workflow.NewSelector(ctx).
			AddReceive(ch, func() {
				v, _ := ch.ReceiveAsync()
				got = append(got, "channel "+v)
			}).
			AddReceive(approvals, func() {
				who, _, err := approvals.ReceiveAsync()
				require.NoError(t, err)
				got = append(got, "signal "+who)
			}).
			AddFuture(deadline, func() {
				_, err := deadline.Get(ctx)
				require.NoError(t, err)
				got = append(got, "timer")
			})
		for range 3 {
			s.Select(ctx)
		}
		return got, nil
	})
	require.Equal(t, []history.Attributes{history.TimerStarted{Seq: 1, FireAt: time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)}}, cmds,
		"the channel case fired in the first task; the selector waits for the rest")
	cmds = r.deliver(history.SignalReceived{Name: "approve", Payload: []byte(`"ada"`)})
	require.Len(t, cmds, 1, "a task that makes no command records its end")
	cmds = r.deliver(history.TimerFired{Seq: 1})
	require.JSONEq(t, `["channel sent", "signal ada", "timer"]`, r.result(cmds))
}

func TestSelectorFiresFutureCaseOnce(t *testing.T) {
	t.Parallel()
	r, _ := newTestRun(t, func(ctx workflow.Context) ([]string, error) {
		ready := workflow.NewTimer(ctx, 0)
		var got []string
		s := workflow.NewSelector(ctx).
			AddFuture(ready, func() { got = append(got, "timer") }).
			AddDefault(func() { got = append(got, "default") })
		s.Select(ctx)
		require.False(t, s.HasPending(), "the future case fired")
		s.Select(ctx)
		return got, nil
	})
	require.JSONEq(t, `["timer", "default"]`, r.result(r.cmds))
}

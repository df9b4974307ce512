package workflow_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/wfexec"
	"github.com/durable-go/durable/workflow"
)

// spinUntil runs without yielding until release is set, and stores the line
// of its loop in line.
func spinUntil(release *atomic.Bool, line *atomic.Int64) {
	_, _, l, _ := runtime.Caller(0)
	line.Store(int64(l) + 2)
	for !release.Load() { // the loop: no workflow call
	}
}

func TestDeadlockFailsTheTaskAndPoisonsTheExecutor(t *testing.T) {
	t.Parallel()
	var (
		release atomic.Bool
		line    atomic.Int64
		runs    atomic.Int32
		early   atomic.Bool // the parked coroutine ran before release
	)
	t.Cleanup(func() { release.Store(true) })
	parked := make(chan struct{})
	fn := func(ctx workflow.Context, _ json.RawMessage) (json.RawMessage, error) {
		runs.Add(1)
		// A second coroutine waits for ever; it must not run while the
		// abandoned one does.
		started := false
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer func() {
				early.Store(!release.Load())
				close(parked)
			}()
			started = true
			workflow.Await(ctx, func() bool { return false })
		})
		workflow.Await(ctx, func() bool { return started })
		spinUntil(&release, &line)
		return json.RawMessage(`1`), nil
	}
	runID := fmt.Sprintf("spin-%d", time.Now().UnixNano())
	o := wfexec.Options{RunID: runID, WorkflowType: "Spin", Func: fn, DeadlockTimeout: 100 * time.Millisecond, Logger: slog.New(slog.DiscardHandler)}
	started := []history.Event{{ID: 1, Time: time.Now(), Attributes: history.WorkflowStarted{WorkflowType: "Spin", Input: json.RawMessage(`null`)}}}

	x := wfexec.New(o)
	began := time.Now()
	err := x.Apply(started, 0)
	var de *workflow.DeadlockError
	require.ErrorAs(t, err, &de, "the task fails once the code has not yielded for 100ms")
	require.Less(t, time.Since(began), 5*time.Second)
	require.Equal(t, runID, de.RunID)
	require.Equal(t, "main", de.Coroutine)
	require.Equal(t, 100*time.Millisecond, de.Timeout)
	require.Regexp(t, fmt.Sprintf(`deadlock_test\.go:%d$`, line.Load()), de.Pos, "where it spun; stack:\n%s", de.Stack)
	require.Contains(t, de.Stack, "workflow_test.spinUntil")
	require.Contains(t, err.Error(), "deadlock in run "+runID)
	require.Contains(t, err.Error(), de.Pos)

	// Poisoned: it runs nothing more, and closing it does not wait for
	// the coroutine that spins.
	err = x.Apply([]history.Event{{ID: 2, Time: time.Now(), Attributes: history.SignalReceived{Name: "s"}}}, 0)
	require.Same(t, de, asDeadlock(t, err), "a poisoned executor fails every Apply")
	closed := make(chan struct{})
	go func() { x.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "Close waits for the coroutine that spins")
	}

	// While it spins, the run's next executor fails at once without
	// running the code again.
	y := wfexec.New(o)
	require.Same(t, de, asDeadlock(t, y.Apply(started, 0)))
	y.Close()
	require.Equal(t, int32(1), runs.Load(), "the code ran once")
	select {
	case <-parked:
		require.FailNow(t, "the parked coroutine was closed while the abandoned one ran")
	default:
	}

	// Once the loop ends, the abandoned coroutine exits, the parked one is
	// closed after it, and the run's code runs again.
	release.Store(true)
	select {
	case <-parked:
	case <-time.After(5 * time.Second):
		require.FailNow(t, "the parked coroutine was not closed after the abandoned one exited")
	}
	require.False(t, early.Load(), "the parked coroutine ran while the abandoned one spun")
	require.Eventually(t, func() bool {
		z := wfexec.New(o)
		defer z.Close()
		return z.Apply(started, 0) == nil
	}, 5*time.Second, 10*time.Millisecond, "the run's code runs again once the abandoned coroutine has exited")
}

func asDeadlock(t *testing.T, err error) *workflow.DeadlockError {
	t.Helper()
	var de *workflow.DeadlockError
	require.ErrorAs(t, err, &de)
	return de
}

func TestDeadlockBoundOff(t *testing.T) {
	t.Parallel()
	busy := func(d time.Duration) any {
		return func(workflow.Context, json.RawMessage) (json.RawMessage, error) {
			for end := time.Now().Add(d); time.Now().Before(end); { // busy, without a workflow call
			}
			return json.RawMessage(`1`), nil
		}
	}
	for _, tt := range []struct {
		name    string
		timeout time.Duration
		busy    time.Duration
		ok      bool
	}{
		{name: "under", timeout: 20 * time.Millisecond, busy: 2 * time.Second, ok: false},
		{name: "off", timeout: -1, busy: 50 * time.Millisecond, ok: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			x := wfexec.New(wfexec.Options{RunID: fmt.Sprintf("busy-%s-%d", tt.name, time.Now().UnixNano()), Func: busy(tt.busy),
				DeadlockTimeout: tt.timeout, Logger: slog.New(slog.DiscardHandler)})
			began := time.Now()
			err := x.Apply([]history.Event{{ID: 1, Time: time.Now(), Attributes: history.WorkflowStarted{Input: json.RawMessage(`null`)}}}, 0)
			if tt.ok {
				require.NoError(t, err)
				require.Len(t, x.TakeCommands(), 1, "the run completes")
			} else {
				var de *workflow.DeadlockError
				require.ErrorAs(t, err, &de)
				require.Less(t, time.Since(began), tt.busy, "the task gave up before the code was done")
			}
			x.Close()
		})
	}
}

package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// AwaitApproval returns the payload of the first "approve" signal.
func AwaitApproval(ctx workflow.Context, _ int) (string, error) {
	return workflow.GetSignalChannel[string](ctx, "approve").Receive(ctx)
}

// controlFixture is a database with an engine that runs its workflows
// (AwaitApproval and Nap) until the test ends, and one closed workflow:
// closed-1, an AwaitApproval that completed.
type controlFixture struct {
	db string
	e  *engine.Engine
}

func controlSetup(t *testing.T) controlFixture {
	t.Helper()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, AwaitApproval, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))

	runEngine(t, e)

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r, err := engine.Start(ctx, e, AwaitApproval, 0, engine.StartOptions{ID: "closed-1"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, e, "closed-1", "approve", "done"))
	res, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "done", res)
	return controlFixture{db: db, e: e}
}

// startRun starts a run of wf as workflowID.
func startRun[Out any](t *testing.T, f controlFixture, wf func(workflow.Context, int) (Out, error), workflowID string) *engine.Run[Out] {
	t.Helper()
	r, err := engine.Start(t.Context(), f.e, wf, 0, engine.StartOptions{ID: workflowID})
	require.NoError(t, err)
	return r
}

// napping starts a Nap as workflowID and waits until it sleeps.
func napping(t *testing.T, f controlFixture, workflowID string) *engine.Run[int] {
	t.Helper()
	r := startRun(t, f, Nap, workflowID)
	require.Eventually(t, func() bool {
		info, err := r.Describe(t.Context())
		return err == nil && len(info.PendingTimers) == 1
	}, 30*time.Second, 20*time.Millisecond, "%s's workflow task starts its hour-long timer", workflowID)
	return r
}

// await waits for r's result.
func await[Out any](t *testing.T, r *engine.Run[Out]) (Out, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return r.Result(ctx)
}

// eventsOf returns the events of type T of workflowID's newest run, read with
// `durable workflow history --json --payloads`.
func eventsOf[T history.Attributes](t *testing.T, db, workflowID string) []T {
	t.Helper()
	r := durable(t, db, "--json", "workflow", "history", workflowID, "--payloads")
	requireCode(t, exitOK, r)
	var events []history.Event
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &events), r.stdout)
	var out []T
	for _, e := range events {
		if a, ok := e.Attributes.(T); ok {
			out = append(out, a)
		}
	}
	return out
}

func TestWorkflowControl(t *testing.T) {
	t.Parallel()
	f := controlSetup(t)

	t.Run("Signal", func(t *testing.T) {
		t.Parallel()
		run := startRun(t, f, AwaitApproval, "signal-1")
		r := durable(t, f.db, "workflow", "signal", "signal-1", "approve", "--payload", ` "yes" `)
		requireCode(t, exitOK, r)
		require.Equal(t, "workflow signal-1: signal approve sent\n", r.stdout)
		require.Empty(t, r.stderr)
		res, err := await(t, run)
		require.NoError(t, err)
		require.Equal(t, "yes", res, "the workflow returns the signal's payload")
	})

	t.Run("SignalPayloadFileJSON", func(t *testing.T) {
		t.Parallel()
		run := startRun(t, f, AwaitApproval, "signal-2")
		file := filepath.Join(t.TempDir(), "approval.json")
		require.NoError(t, os.WriteFile(file, []byte("\"from a file\"\n"), 0o600))
		r := durable(t, f.db, "--json", "workflow", "signal", "signal-2", "approve", "--payload-file", file)
		requireCode(t, exitOK, r)
		require.JSONEq(t, `{"workflow_id": "signal-2", "done": "signal"}`, r.stdout)
		res, err := await(t, run)
		require.NoError(t, err)
		require.Equal(t, "from a file", res)
	})

	t.Run("SignalDefaultsToNull", func(t *testing.T) {
		t.Parallel()
		run := startRun(t, f, AwaitApproval, "signal-3")
		r := durable(t, f.db, "workflow", "signal", "signal-3", "approve")
		requireCode(t, exitOK, r)
		res, err := await(t, run)
		require.NoError(t, err)
		require.Empty(t, res)
		signals := eventsOf[history.SignalReceived](t, f.db, "signal-3")
		require.Len(t, signals, 1)
		require.Equal(t, "approve", signals[0].Name)
		require.JSONEq(t, "null", string(signals[0].Payload))
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		run := napping(t, f, "cancel-1")
		r := durable(t, f.db, "workflow", "cancel", "cancel-1", "--reason", "customer withdrew")
		requireCode(t, exitOK, r)
		require.Equal(t, "workflow cancel-1: cancel requested: the run ends as canceled once its workflow code returns\n", r.stdout)
		require.Equal(t, []history.WorkflowCancelRequested{{Reason: "customer withdrew"}},
			eventsOf[history.WorkflowCancelRequested](t, f.db, "cancel-1"))
		_, err := await(t, run)
		var wfErr *engine.WorkflowError
		require.ErrorAs(t, err, &wfErr, "Nap's sleep fails with workflow.ErrCanceled")
		info, err := run.Describe(t.Context())
		require.NoError(t, err)
		require.Equal(t, engine.StatusCanceled, info.Status)

		r = durable(t, f.db, "workflow", "cancel", "cancel-1")
		requireCode(t, exitFailure, r)
		require.Contains(t, r.stderr, `workflow "cancel-1" has no open run: its last run is canceled`)
		require.Empty(t, r.stdout)
	})

	t.Run("CancelJSONDefaultReason", func(t *testing.T) {
		t.Parallel()
		napping(t, f, "cancel-2")
		r := durable(t, f.db, "--json", "workflow", "cancel", "cancel-2")
		requireCode(t, exitOK, r)
		require.JSONEq(t, `{"workflow_id": "cancel-2", "done": "cancel"}`, r.stdout)
		require.Equal(t, []history.WorkflowCancelRequested{{Reason: defaultReason()}},
			eventsOf[history.WorkflowCancelRequested](t, f.db, "cancel-2"), "who asked, by default")
	})

	t.Run("Terminate", func(t *testing.T) {
		t.Parallel()
		run := napping(t, f, "terminate-1")
		r := durable(t, f.db, "workflow", "terminate", "terminate-1")
		requireCode(t, exitOK, r)
		require.Equal(t, "workflow terminate-1: terminated\n", r.stdout)
		info, err := run.Describe(t.Context())
		require.NoError(t, err)
		require.Equal(t, engine.StatusTerminated, info.Status, "terminate closes the run at once")
		require.Empty(t, info.PendingTimers)
		require.Equal(t, []history.WorkflowTerminated{{Reason: defaultReason()}},
			eventsOf[history.WorkflowTerminated](t, f.db, "terminate-1"))

		r = durable(t, f.db, "--json", "workflow", "terminate", "terminate-1")
		requireCode(t, exitFailure, r)
		require.Contains(t, r.stderr, `workflow "terminate-1" has no open run: its last run is terminated`)
		require.Empty(t, r.stdout)
	})

	t.Run("TerminateJSONReason", func(t *testing.T) {
		t.Parallel()
		run := napping(t, f, "terminate-2")
		r := durable(t, f.db, "--json", "workflow", "terminate", "terminate-2", "--reason", "stuck on a bad deploy")
		requireCode(t, exitOK, r)
		require.JSONEq(t, `{"workflow_id": "terminate-2", "done": "terminate"}`, r.stdout)
		_, err := await(t, run)
		var wfErr *engine.WorkflowError
		require.ErrorAs(t, err, &wfErr)
		require.Equal(t, "terminated: stuck on a bad deploy", wfErr.Failure.Message)
	})

	t.Run("NoOpenRun", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			code int
			want string
		}{
			{"SignalUnknown", []string{"workflow", "signal", "nope", "approve"}, exitNotFound, `no workflow with ID "nope": find workflow IDs with 'durable workflow list'`},
			{"CancelUnknown", []string{"workflow", "cancel", "nope"}, exitNotFound, `no workflow with ID "nope"`},
			{"TerminateUnknown", []string{"--json", "workflow", "terminate", "nope"}, exitNotFound, `no workflow with ID "nope"`},
			{"SignalClosed", []string{"workflow", "signal", "closed-1", "approve", "--payload", `"again"`}, exitFailure, `workflow "closed-1" has no open run: its last run is completed (see 'durable workflow describe "closed-1"')`},
			{"CancelClosed", []string{"--json", "workflow", "cancel", "closed-1"}, exitFailure, `workflow "closed-1" has no open run: its last run is completed`},
			{"TerminateClosed", []string{"workflow", "terminate", "closed-1"}, exitFailure, `workflow "closed-1" has no open run: its last run is completed`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, f.db, tt.args...)
				requireCode(t, tt.code, r)
				require.Contains(t, r.stderr, tt.want)
				require.Empty(t, r.stdout)
			})
		}
	})
}

func TestWorkflowControlUsageErrors(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "bad.json")
	require.NoError(t, os.WriteFile(file, []byte("{oops"), 0o600))
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"SignalNoArgs", []string{"workflow", "signal"}, "takes a workflow ID and a signal name, got 0"},
		{"SignalNoName", []string{"workflow", "signal", "order-1"}, "takes a workflow ID and a signal name, got 1"},
		{"SignalEmptyName", []string{"workflow", "signal", "order-1", ""}, `signal name "": want 1 to 200 bytes`},
		{"SignalLongName", []string{"workflow", "signal", "order-1", strings.Repeat("x", 201)}, "want 1 to 200 bytes"},
		{"BadJSON", []string{"workflow", "signal", "order-1", "approve", "--payload", "yes"}, `--payload is not valid JSON (invalid character 'y'`},
		{"EmptyJSON", []string{"workflow", "signal", "order-1", "approve", "--payload", ""}, "--payload is not valid JSON"},
		{"TwoValues", []string{"workflow", "signal", "order-1", "approve", "--payload", "1 2"}, "--payload is not valid JSON"},
		{"BadJSONFile", []string{"workflow", "signal", "order-1", "approve", "--payload-file", file}, "--payload-file " + file + " is not valid JSON"},
		{"NoFile", []string{"workflow", "signal", "order-1", "approve", "--payload-file", file + ".missing"}, "--payload-file: open " + file + ".missing: no such file"},
		{"BothPayloads", []string{"workflow", "signal", "order-1", "approve", "--payload", "1", "--payload-file", file}, "give --payload or --payload-file, not both"},
		{"CancelNoID", []string{"workflow", "cancel"}, "takes one workflow ID, got 0"},
		{"CancelTwoIDs", []string{"workflow", "cancel", "a", "b"}, "takes one workflow ID, got 2"},
		{"TerminateNoID", []string{"--json", "workflow", "terminate"}, "takes one workflow ID, got 0"},
		{"TerminateEmptyReason", []string{"workflow", "terminate", "order-1", "--reason", " "}, "--reason must not be empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The database is unreachable: usage is checked before connecting.
			r := durable(t, unreachable, tt.args...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tt.want)
			require.Contains(t, r.stderr, "--help' for usage")
			require.Empty(t, r.stdout)
		})
	}
}

func TestWorkflowControlHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"Root", []string{"--help"}, []string{"signals, cancels and terminates runs", "3  not found: no workflow, run or dead letter with that ID"}},
		{"Workflow", []string{"workflow"}, []string{"signal", "cancel", "terminate", "whose runs have all closed exits 1"}},
		{"Signal", []string{"workflow", "signal", "--help"}, []string{"--payload", "--payload-file", "default null"}},
		{"Cancel", []string{"help", "workflow", "cancel"}, []string{"--reason", "by $USER from the durable CLI", "workflow.ErrCanceled"}},
		{"Terminate", []string{"workflow", "terminate", "--help"}, []string{"--reason", "No workflow code runs", "use cancel"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, "", tt.args...)
			requireCode(t, exitOK, r)
			for _, w := range tt.want {
				require.Contains(t, r.stdout, w)
			}
		})
	}
}

func TestWorkflowControlDatabaseErrors(t *testing.T) {
	t.Parallel()
	commands := []struct {
		name string
		args []string
	}{
		{"Signal", []string{"workflow", "signal", "x", "approve", "--payload", "{}"}},
		{"Cancel", []string{"workflow", "cancel", "x"}},
		{"Terminate", []string{"--json", "workflow", "terminate", "x"}},
	}
	for _, c := range commands {
		t.Run("Unreachable/"+c.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, unreachable, c.args...)
			requireCode(t, exitUnreachable, r)
			require.Contains(t, r.stderr, "cannot reach the database at 127.0.0.1:1/x")
			require.Empty(t, r.stdout)
		})
	}

	pool, db := pgtest.PoolURL(t)
	_, err := pool.Exec(t.Context(), "DELETE FROM durable_schema_migrations")
	require.NoError(t, err)
	for _, c := range commands {
		t.Run("SchemaBehind/"+c.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, db, c.args...)
			requireCode(t, exitSchema, r)
			require.Contains(t, r.stderr, "run `durable migrate`")
			require.Empty(t, r.stdout)
		})
	}
}

// runEngine runs e until the test ends. Registered after the pool's
// cleanup, its own runs first.
func runEngine(t *testing.T, e *engine.Engine) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()
	t.Cleanup(func() {
		stop()
		require.NoError(t, <-done)
	})
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

// secret is in Greet's input and result: no output may show it unasked.
const secret = "ada-secret-4242"

func Greet(ctx workflow.Context, name string) (string, error) {
	return workflow.ExecuteActivity(ctx, Hello, name).Get(ctx)
}

func Hello(_ context.Context, name string) (string, error) { return "hello " + name, nil }

func Nap(ctx workflow.Context, _ int) (int, error) { return 0, workflow.Sleep(ctx, time.Hour) }

func Flaky(ctx workflow.Context, _ int) (int, error) {
	return workflow.ExecuteActivity(ctx, AlwaysFails, 0).Get(ctx)
}

func AlwaysFails(context.Context, int) (int, error) { return 0, errors.New("card network down") }

func Doomed(workflow.Context, int) (int, error) { return 0, errors.New("out of stock") }

func Panicky(workflow.Context, int) (int, error) { panic("inventory client is nil") }

// fixture is a database with, oldest first: greet-1's first run
// (completed), nap-1 (running, a pending timer), flaky-1 (running, an
// activity waiting to retry), doomed-1 (failed), panicky-1 (running, its
// workflow task failing) and greet-1's second run (completed).
type fixture struct {
	db string
	// greet1 and greet2 are greet-1's run IDs, oldest first.
	greet1, greet2 string
}

func setup(t *testing.T) fixture {
	t.Helper()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Greet, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Flaky, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Doomed, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Panicky, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Hello, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, AlwaysFails, activity.Options{
		Retry: activity.RetryPolicy{InitialInterval: time.Hour, MaximumAttempts: 3},
	}))

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f := fixture{db: db}
	g, err := engine.Start(ctx, e, Greet, secret, engine.StartOptions{ID: "greet-1"})
	require.NoError(t, err)
	res, err := g.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello "+secret, res)
	f.greet1 = g.RunID

	_, err = engine.Start(ctx, e, Nap, 0, engine.StartOptions{ID: "nap-1"})
	require.NoError(t, err)
	flaky, err := engine.Start(ctx, e, Flaky, 0, engine.StartOptions{ID: "flaky-1"})
	require.NoError(t, err)
	d, err := engine.Start(ctx, e, Doomed, 0, engine.StartOptions{ID: "doomed-1"})
	require.NoError(t, err)
	_, err = d.Result(ctx)
	var wfErr *engine.WorkflowError
	require.ErrorAs(t, err, &wfErr)
	_, err = engine.Start(ctx, e, Panicky, 0, engine.StartOptions{ID: "panicky-1"})
	require.NoError(t, err)

	g, err = engine.Start(ctx, e, Greet, secret, engine.StartOptions{ID: "greet-1"})
	require.NoError(t, err)
	require.False(t, g.Existing, "greet-1's first run closed: this is a new one")
	_, err = g.Result(ctx)
	require.NoError(t, err)
	f.greet2 = g.RunID

	s := postgres.New(pool)
	nap, err := e.Describe(ctx, "nap-1")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		timers, err := s.ListPendingTimers(ctx, nap.RunID)
		return err == nil && len(timers) == 1
	}, 30*time.Second, 20*time.Millisecond, "nap-1's workflow task starts its timer")
	require.Eventually(t, func() bool {
		acts, err := s.ListPendingActivities(ctx, flaky.RunID)
		return err == nil && len(acts) == 1 && acts[0].LastError != ""
	}, 30*time.Second, 20*time.Millisecond, "flaky-1's activity fails its first attempt and waits up to an hour to retry")
	require.Eventually(t, func() bool {
		info, err := e.Describe(ctx, "panicky-1")
		return err == nil && info.TaskError != ""
	}, 30*time.Second, 20*time.Millisecond, "panicky-1's workflow task panics")
	return f
}

func TestWorkflowCommands(t *testing.T) {
	t.Parallel()
	f := setup(t)

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "list")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 7, r.stdout)
		require.Regexp(t, `^WORKFLOW ID\s+RUN ID\s+TYPE\s+STATUS\s+CREATED\s+CLOSED$`, lines[0])
		require.Regexp(t, `^greet-1\s+`+f.greet2+`\s+Greet\s+completed\s+\S+\s+\S+$`, lines[1], "newest first")
		require.Regexp(t, `^panicky-1\s+\S+\s+Panicky\s+running\s`, lines[2])
		require.Regexp(t, `^doomed-1\s+\S+\s+Doomed\s+failed\s`, lines[3])
		require.Regexp(t, `^flaky-1\s+\S+\s+Flaky\s+running\s+\S+\s+-$`, lines[4])
		require.Regexp(t, `^nap-1\s+\S+\s+Nap\s+running\s`, lines[5])
		require.Regexp(t, `^greet-1\s+`+f.greet1+`\s`, lines[6])
		require.NotContains(t, r.stdout, secret)
		require.Empty(t, r.stderr)

		r = durable(t, f.db, "workflow", "list", "--limit", "3")
		requireCode(t, exitOK, r)
		require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 4, r.stdout)
		require.Contains(t, r.stderr, "showing the newest 3 runs", "a full page says there may be more")
	})

	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			want []string // workflow IDs
		}{
			{"Status", []string{"--status", "running"}, []string{"panicky-1", "flaky-1", "nap-1"}},
			{"Failed", []string{"--status", "failed"}, []string{"doomed-1"}},
			{"Type", []string{"--type", "Greet"}, []string{"greet-1", "greet-1"}},
			{"ID", []string{"--id", "nap-1"}, []string{"nap-1"}},
			{"Limit", []string{"--limit", "2"}, []string{"greet-1", "panicky-1"}},
			{"SinceDuration", []string{"--since", "1h"}, []string{"greet-1", "panicky-1", "doomed-1", "flaky-1", "nap-1", "greet-1"}},
			{"SinceDays", []string{"--since", "1d", "--status", "failed"}, []string{"doomed-1"}},
			{"SinceFuture", []string{"--since", time.Now().Add(time.Hour).Format(time.RFC3339)}, nil},
			{"None", []string{"--status", "canceled"}, nil},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, f.db, append([]string{"--json", "workflow", "list"}, tt.args...)...)
				requireCode(t, exitOK, r)
				var runs []store.RunSummary
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
				require.NotNil(t, runs, "an empty list is [], not null")
				var got []string
				for _, run := range runs {
					got = append(got, run.WorkflowID)
				}
				require.Equal(t, tt.want, got)
			})
		}
	})

	t.Run("ListEmptyText", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "list", "--status", "terminated")
		requireCode(t, exitOK, r)
		require.Equal(t, "no runs found\n", r.stdout)
	})

	t.Run("DescribeCompleted", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "describe", "greet-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Run ID\s+`+f.greet2+`$`, r.stdout, "the newest run")
		require.Regexp(t, `(?m)^Status\s+completed$`, r.stdout)
		require.Regexp(t, `(?m)^Type\s+Greet$`, r.stdout)
		require.Regexp(t, `(?m)^Queue\s+default$`, r.stdout)
		require.Regexp(t, `(?m)^Last event ID\s+4$`, r.stdout)
		require.Contains(t, r.stdout, "Pending activities: 0")
		require.Contains(t, r.stdout, "Pending timers: 0")
		require.NotContains(t, r.stdout, secret, "no payloads unasked")

		r = durable(t, f.db, "workflow", "describe", "greet-1", "--payloads")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Input\s+"`+secret+`"$`, r.stdout)
		require.Regexp(t, `(?m)^Result\s+"hello `+secret+`"$`, r.stdout)

		r = durable(t, f.db, "workflow", "describe", "greet-1", "--run", f.greet1)
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Run ID\s+`+f.greet1+`$`, r.stdout, "the run --run names")
	})

	t.Run("DescribeJSON", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "workflow", "describe", "greet-1", "--run", f.greet1)
		requireCode(t, exitOK, r)
		require.NotContains(t, r.stdout, secret, "no payloads unasked")
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, "greet-1", d.WorkflowID)
		require.Equal(t, f.greet1, d.RunID)
		require.Equal(t, "completed", d.Status)
		require.NotNil(t, d.ClosedAt)
		require.NotNil(t, d.PendingActivities)
		require.Empty(t, d.PendingActivities)
		require.Nil(t, d.Input)

		r = durable(t, f.db, "--json", "workflow", "describe", "greet-1", "--payloads")
		requireCode(t, exitOK, r)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.JSONEq(t, `"`+secret+`"`, string(d.Input))
		require.JSONEq(t, `"hello `+secret+`"`, string(d.Result))
	})

	t.Run("DescribePendingActivity", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "describe", "flaky-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Status\s+running$`, r.stdout)
		require.Contains(t, r.stdout, "Pending activities: 1")
		require.Regexp(t, `(?m)^\s+1\s+AlwaysFails\s+default\s+\d of 3\s+`, r.stdout)
		require.Contains(t, r.stdout, "card network down")
		require.NotContains(t, r.stdout, "input of seq 1")

		r = durable(t, f.db, "workflow", "describe", "flaky-1", "--payloads")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "input of seq 1: 0")

		r = durable(t, f.db, "--json", "workflow", "describe", "flaky-1")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Len(t, d.PendingActivities, 1)
		a := d.PendingActivities[0]
		require.Equal(t, "AlwaysFails", a.Activity)
		require.GreaterOrEqual(t, a.Attempts, 1)
		require.Equal(t, 3, a.MaxAttempts)
		require.Equal(t, "card network down", a.LastError)
		require.False(t, a.RunAfter.IsZero())
		require.Nil(t, a.Input, "an activity's input is a payload")
		require.Empty(t, d.PendingTimers)
	})

	t.Run("DescribePendingTimer", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "describe", "nap-1")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "Pending timers: 1")
		require.Regexp(t, `(?m)^\s+1\s+\S+ \(in \d+m\d+s\)$`, r.stdout)

		r = durable(t, f.db, "--json", "workflow", "describe", "nap-1")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Len(t, d.PendingTimers, 1)
		require.WithinDuration(t, time.Now().Add(time.Hour), d.PendingTimers[0].FireAt, 5*time.Minute)
	})

	t.Run("DescribeFailed", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "describe", "doomed-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Status\s+failed$`, r.stdout)
		require.Regexp(t, `(?m)^Failure\s+out of stock`, r.stdout)
	})

	t.Run("DescribeTaskError", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "describe", "panicky-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Status\s+running$`, r.stdout, "a failing workflow task does not fail the run")
		require.Regexp(t, `Workflow task failing \(\d+ failed attempt\(s\)\); the run waits until it is fixed:\n  \S.*inventory client is nil`, r.stdout)
		require.Contains(t, r.stdout, "\n    ", "the stack trace is indented under the error")

		r = durable(t, f.db, "--json", "workflow", "describe", "panicky-1")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Contains(t, d.TaskError, "inventory client is nil")
		require.GreaterOrEqual(t, d.TaskAttempts, 1)
	})

	t.Run("History", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "workflow", "history", "greet-1")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 5, r.stdout)
		require.Regexp(t, `^ID\s+TIME\s+TYPE\s+SUMMARY$`, lines[0])
		require.Regexp(t, `^1\s+\S+\s+workflow_started\s+Greet on queue default$`, lines[1])
		require.Regexp(t, `^2\s+\S+\s+activity_scheduled\s+seq 1: Hello on queue default$`, lines[2])
		require.Regexp(t, `^3\s+\S+\s+activity_completed\s+seq 1, attempt 1$`, lines[3])
		require.Regexp(t, `^4\s+\S+\s+workflow_completed$`, lines[4])
		require.NotContains(t, r.stdout, secret)

		r = durable(t, f.db, "workflow", "history", "greet-1", "--payloads")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, `Greet on queue default: "`+secret+`"`)
		require.Contains(t, r.stdout, `seq 1, attempt 1: "hello `+secret+`"`)

		r = durable(t, f.db, "workflow", "history", "doomed-1")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "workflow_failed")
		require.Contains(t, r.stdout, "out of stock")
	})

	t.Run("HistoryJSON", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "workflow", "history", "greet-1", "--run", f.greet1)
		requireCode(t, exitOK, r)
		require.NotContains(t, r.stdout, secret, "no payloads unasked")
		var events []history.Event
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &events), r.stdout)
		require.Len(t, events, 4)
		started, ok := events[0].Attributes.(history.WorkflowStarted)
		require.True(t, ok, "event 1 is %T", events[0].Attributes)
		require.Equal(t, "greet-1", started.WorkflowID)
		require.JSONEq(t, "null", string(started.Input))

		r = durable(t, f.db, "--json", "workflow", "history", "greet-1", "--run", f.greet1, "--payloads")
		requireCode(t, exitOK, r)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &events), r.stdout)
		require.Equal(t, []string{"workflow_started", "activity_scheduled", "activity_completed", "workflow_completed"}, eventTypes(events))
		for i, e := range events {
			require.Equal(t, int64(i+1), e.ID)
		}
		started, ok = events[0].Attributes.(history.WorkflowStarted)
		require.True(t, ok)
		require.JSONEq(t, `"`+secret+`"`, string(started.Input), "--payloads gives the whole history")
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		other, err := uuid.NewRandom()
		require.NoError(t, err)
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"Describe", []string{"workflow", "describe", "nope"}, `no workflow with ID "nope": find workflow IDs with 'durable workflow list'`},
			{"History", []string{"--json", "workflow", "history", "nope"}, `no workflow with ID "nope"`},
			{"RunNotUUID", []string{"workflow", "describe", "greet-1", "--run", "xyz"}, `run ID "xyz" is not a UUID: list its runs with 'durable workflow list --id "greet-1"'`},
			{"UnknownRun", []string{"workflow", "history", "greet-1", "--run", other.String()}, `workflow "greet-1" has no run ` + other.String()},
			{"RunOfOtherWorkflow", []string{"workflow", "describe", "nap-1", "--run", f.greet1}, `workflow "nap-1" has no run ` + f.greet1},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, f.db, tt.args...)
				requireCode(t, exitNotFound, r)
				require.Contains(t, r.stderr, tt.want)
				require.Empty(t, r.stdout)
			})
		}
	})
}

func eventTypes(events []history.Event) []string {
	var ts []string
	for _, e := range events {
		ts = append(ts, e.Type())
	}
	return ts
}

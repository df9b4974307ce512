package main

import (
	"context"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

// marker is in the inputs, results, signal payloads, side-effect values
// and heartbeat details of the runs payloadSetup makes, and nowhere else:
// not in a workflow ID, type name or error.
const marker = "pii-marker-5c1e"

// Parent runs Greet as a child and records a side effect.
func Parent(ctx workflow.Context, name string) (string, error) {
	v := workflow.SideEffect(ctx, func() string { return name })
	return workflow.ExecuteChildWorkflow(ctx, Greet, v, workflow.ChildOptions{ID: "child-1"}).Get(ctx)
}

// Beating runs BeatThenFail, which waits an hour to retry.
func Beating(ctx workflow.Context, name string) (string, error) {
	return workflow.ExecuteActivity(ctx, BeatThenFail, name).Get(ctx)
}

// BeatThenFail records its input as heartbeat details, then fails.
func BeatThenFail(ctx context.Context, name string) (string, error) {
	if err := activity.RecordHeartbeat(ctx, name); err != nil {
		return "", err
	}
	return "", errors.New("not yet")
}

// payloadSetup returns a database with runs and dead letters whose
// payloads hold marker: parent-1 and its child child-1 (completed),
// approve-1 (completed with a signal's payload), order-1 (failed, a dead
// letter), beating-1 (running, an activity with heartbeat details waiting
// to retry), and the job ship-1 (a dead letter).
func payloadSetup(t *testing.T) string {
	t.Helper()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{Logger: slog.New(slog.DiscardHandler), PollInterval: time.Second})
	require.NoError(t, err)
	for _, err := range []error{
		engine.RegisterWorkflow(e, Parent, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, Greet, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, AwaitApproval, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, Order, engine.WorkflowOptions{}),
		engine.RegisterWorkflow(e, Beating, engine.WorkflowOptions{}),
		engine.RegisterActivity(e, Hello, activity.Options{}),
		engine.RegisterActivity(e, Reserve, activity.Options{}),
		engine.RegisterActivity(e, Charge, activity.Options{}),
		engine.RegisterActivity(e, Ship, activity.Options{}),
		engine.RegisterActivity(e, BeatThenFail, activity.Options{
			Retry: activity.RetryPolicy{InitialInterval: time.Hour, MaximumAttempts: 3},
		}),
	} {
		require.NoError(t, err)
	}
	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	p, err := engine.Start(ctx, e, Parent, marker, engine.StartOptions{ID: "parent-1"})
	require.NoError(t, err)
	res, err := p.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello "+marker, res)

	a, err := engine.Start(ctx, e, AwaitApproval, 0, engine.StartOptions{ID: "approve-1"})
	require.NoError(t, err)
	require.NoError(t, engine.Signal(ctx, e, "approve-1", "approve", marker))
	res, err = a.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, marker, res)

	o, err := engine.Start(ctx, e, Order, marker, engine.StartOptions{ID: "order-1"})
	require.NoError(t, err)
	_, err = o.Result(ctx)
	var wfErr *engine.WorkflowError
	require.ErrorAs(t, err, &wfErr)

	_, err = engine.Enqueue(ctx, e, Ship, marker, engine.JobOptions{Key: "ship-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
		return err == nil && len(ds) == 2
	}, 30*time.Second, 20*time.Millisecond, "order-1 and the job ship-1 are dead-lettered")

	b, err := engine.Start(ctx, e, Beating, marker, engine.StartOptions{ID: "beating-1"})
	require.NoError(t, err)
	s := postgres.New(pool)
	require.Eventually(t, func() bool {
		acts, err := s.ListPendingActivities(ctx, b.RunID)
		return err == nil && len(acts) == 1 && acts[0].LastError != "" && acts[0].Heartbeat != nil
	}, 30*time.Second, 20*time.Millisecond, "beating-1's activity records a heartbeat, fails and waits an hour to retry")
	return db
}

// TestOutputHasNoPayloadsUnasked checks that no command prints a payload
// unless --payloads asks for it: the listings never do, and describe,
// history and dlq show do only when asked.
func TestOutputHasNoPayloadsUnasked(t *testing.T) {
	t.Parallel()
	db := payloadSetup(t)

	var commands [][]string
	for _, args := range [][]string{
		// The listings, which show other runs than one named.
		{"workflow", "list"},
		{"workflow", "list", "--status", "running"},
		{"workflow", "list", "--id", "child-1"},
		{"dlq", "list", "--all"},
		{"dlq", "list", "--kind", "job"},
		{"stats"},
		{"stats", "--window", "1d"},
		// One named run or dead letter, without --payloads.
		{"workflow", "describe", "parent-1"},
		{"workflow", "describe", "child-1"},
		{"workflow", "describe", "approve-1"},
		{"workflow", "describe", "order-1"},
		{"workflow", "describe", "beating-1"},
		{"workflow", "history", "parent-1"},
		{"workflow", "history", "child-1"},
		{"workflow", "history", "approve-1"},
		{"workflow", "history", "order-1"},
		{"workflow", "history", "beating-1"},
		{"dlq", "show", "1"},
		{"dlq", "show", "2"},
	} {
		commands = append(commands, args, append([]string{"--json"}, args...))
	}
	for _, args := range commands {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := durable(t, db, args...)
			requireCode(t, exitOK, r)
			require.NotEmpty(t, r.stdout)
			require.NotContains(t, r.stdout, marker, "a payload printed unasked")
			require.NotContains(t, r.stderr, marker, "a payload printed unasked")
		})
	}

	// The marker is there to be found when asked for.
	for _, args := range [][]string{
		{"workflow", "describe", "parent-1", "--payloads"},
		{"--json", "workflow", "describe", "beating-1", "--payloads"},
		{"workflow", "history", "parent-1", "--payloads"},
		{"--json", "workflow", "history", "approve-1", "--payloads"},
		{"dlq", "show", "1", "--payloads"},
		{"--json", "dlq", "show", "2", "--payloads"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := durable(t, db, args...)
			requireCode(t, exitOK, r)
			require.Contains(t, r.stdout, marker, "--payloads prints the payloads")
		})
	}
}

// TestRedactCoversEveryEvent fills every payload field of every event type
// that package history declares, and checks that redact and summarize
// leave none of them in what history prints unasked. It reads the event
// types from history/events.go, so a new one cannot be missed.
func TestRedactCoversEveryEvent(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../history/events.go", nil, 0)
	require.NoError(t, err)
	var types []string
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Name.Name != "EventType" || fn.Recv == nil || len(fn.Body.List) != 1 {
			continue
		}
		ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
		if !ok || len(ret.Results) != 1 {
			continue
		}
		lit, ok := ret.Results[0].(*ast.BasicLit)
		require.True(t, ok && lit.Kind == token.STRING, "%s: EventType returns a string literal", fset.Position(fn.Pos()))
		name, err := strconv.Unquote(lit.Value)
		require.NoError(t, err)
		types = append(types, name)
	}
	require.GreaterOrEqual(t, len(types), 20, "the event types of history/events.go")

	raw := reflect.TypeFor[[]byte]()
	for _, typ := range types {
		t.Run(typ, func(t *testing.T) {
			t.Parallel()
			zero, err := history.Decode(typ, []byte("{}"))
			require.NoError(t, err)
			v := reflect.New(reflect.TypeOf(zero)).Elem()
			payloads := 0
			for i := range v.NumField() {
				field := v.Type().Field(i)
				// Options are an activity's timeouts and retry policy, not
				// data of the user's.
				if field.Type.ConvertibleTo(raw) && field.Type.Kind() == reflect.Slice && field.Name != "Options" {
					v.Field(i).SetBytes([]byte(strconv.Quote(marker)))
					payloads++
				}
			}
			a := v.Interface().(history.Attributes)
			if payloads > 0 {
				require.Contains(t, summarize(a, true), marker, "--payloads prints the payload")
			}
			require.NotContains(t, summarize(a, false), marker, "summarize prints a payload unasked: add it to redact and summarize in workflow.go")
			b, err := history.Encode(redact(a))
			require.NoError(t, err)
			require.NotContains(t, string(b), marker, "redact leaves a payload: add it to redact in workflow.go")
		})
	}
}

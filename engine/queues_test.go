package engine_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

func Greet(_ context.Context, name string) (string, error) { return "Hello " + name + "!", nil }

func HelloWorld(ctx workflow.Context, name string) (string, error) {
	return workflow.ExecuteActivity(ctx, Greet, name).Get(ctx)
}

// TestQueueNamedAtRegistrationIsServed: a workflow and its activity
// registered on "hello-world", with no Options.Queues, run (#37).
func TestQueueNamedAtRegistrationIsServed(t *testing.T) {
	t.Parallel()
	e := newEngine(t, pgtest.Pool(t), engine.Options{})
	require.NoError(t, engine.RegisterWorkflow(e, HelloWorld, engine.WorkflowOptions{Queue: "hello-world"}))
	require.NoError(t, engine.RegisterActivity(e, Greet, activity.Options{Queue: "hello-world"}))
	run(t, e)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := engine.Start(ctx, e, HelloWorld, "Temporal", engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err, "the run on queue hello-world was never served")
	require.Equal(t, "Hello Temporal!", got)
	info, err := r.Describe(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello-world", info.Queue)
}

// lockedLog is a log sink that tests read while the engine writes to it.
type lockedLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestExplicitQueuesWarnOfRegistrationsNotServed: an explicit
// Options.Queues is served as listed, and Run says at Warn which
// registrations it leaves to other workers.
func TestExplicitQueuesWarnOfRegistrationsNotServed(t *testing.T) {
	t.Parallel()
	var logs lockedLog
	e := newEngine(t, pgtest.Pool(t), engine.Options{
		Queues: map[string]engine.QueueOptions{"default": {}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, engine.RegisterWorkflow(e, HelloWorld, engine.WorkflowOptions{Queue: "hello-world"}))
	require.NoError(t, engine.RegisterActivity(e, Greet, activity.Options{Queue: "greetings"}))
	run(t, e)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "engine running") }, 10*time.Second,
		5*time.Millisecond, "Run started")
	out := logs.String()
	require.Contains(t, out, `level=WARN msg="registered on a queue this engine does not poll`)
	require.Contains(t, out, `workflow=HelloWorld queue=hello-world`)
	require.Contains(t, out, `activity=Greet queue=greetings`)

	require.NoError(t, engine.RegisterActivity(e, Add, activity.Options{Queue: "later"}), "with Options.Queues a late registration is warned of, as at Run")
	require.Contains(t, logs.String(), `activity=Add queue=later`)
}

// TestRegisterAfterRun: without Options.Queues, a registration on a queue
// the running engine polls is served; one on a queue it does not poll is
// refused, saying why.
func TestRegisterAfterRun(t *testing.T) {
	t.Parallel()
	var logs lockedLog
	e := newEngine(t, pgtest.Pool(t), engine.Options{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	run(t, e)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "engine running") }, 10*time.Second,
		5*time.Millisecond, "Run started")

	err := engine.RegisterWorkflow(e, HelloWorld, engine.WorkflowOptions{Queue: "hello-world"})
	require.ErrorContains(t, err, `queue "hello-world"`)
	require.ErrorContains(t, err, "register before Run")
	require.NoError(t, engine.RegisterWorkflow(e, HelloWorld, engine.WorkflowOptions{}), "a refused registration leaves nothing behind")
	require.NoError(t, engine.RegisterActivity(e, Greet, activity.Options{}))
	ctx := resultCtx(t)
	r, err := engine.Start(ctx, e, HelloWorld, "late", engine.StartOptions{})
	require.NoError(t, err)
	got, err := r.Result(ctx)
	require.NoError(t, err)
	require.Equal(t, "Hello late!", got)
}

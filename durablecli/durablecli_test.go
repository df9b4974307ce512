package durablecli_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/durablecli"
	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/onboarding/onboard"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/workflow"
)

var nudged = filepath.Join("..", "testdata", "histories", "onboarding-nudged.json")

func run(t *testing.T, register func(engine.Registrar) error, args ...string) (string, int) {
	t.Helper()
	var out bytes.Buffer
	code := durablecli.Run(context.Background(), args, &out, &out, register)
	return out.String(), code
}

func TestTraceFromFile(t *testing.T) {
	t.Parallel()
	out, code := run(t, onboard.Register, "trace", "--file", nudged)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "1  ->  WorkflowStarted(Onboard)")
	require.Regexp(t, regexp.MustCompile(`2  <-  ActivityScheduled\(ChargeCard, seq 1\) at .*onboard\.go:\d+`), out,
		"each command names the line of workflow code that made it")
	require.Contains(t, out, "log INFO sleeping before the setup check", "the workflow's log lines appear as replay reaches them")
	require.NotContains(t, out, "DIVERGES")
}

func TestTraceUntilPrintsWhatTheRunWaitsFor(t *testing.T) {
	t.Parallel()
	out, code := run(t, onboard.Register, "trace", "--file", nudged, "--until", "4")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "stopped after event 4; the run waits for:")
	require.Contains(t, out, "activity ProvisionAccount (seq 2)")
	require.NotContains(t, out, "SendWelcomeEmail")
}

func registerSwapped(r engine.Registrar) error {
	swapped := func(ctx workflow.Context, in onboard.OnboardInput) (onboard.OnboardResult, error) {
		if _, err := workflow.ExecuteActivity(ctx, onboard.ProvisionAccount, in.Email).Get(ctx); err != nil {
			return onboard.OnboardResult{}, err
		}
		return onboard.OnboardResult{}, workflow.Sleep(ctx, time.Hour)
	}
	if err := engine.RegisterWorkflow(r, swapped, engine.WorkflowOptions{Name: "Onboard"}); err != nil {
		return err
	}
	return engine.RegisterActivity(r, onboard.ProvisionAccount, activity.Options{})
}

func TestTraceReportsTheDivergence(t *testing.T) {
	t.Parallel()
	out, code := run(t, registerSwapped, "trace", "--file", nudged)
	require.Equal(t, 1, code, out)
	require.Regexp(t, regexp.MustCompile(`DIVERGES: non-determinism in run .* at event 2: history has ActivityScheduled\(ChargeCard, seq 1\), code did ActivityScheduled\(ProvisionAccount, seq 1\) at .*durablecli_test\.go:\d+`), out)
}

func TestCheckOpenRunsGatesADeploy(t *testing.T) {
	t.Parallel()
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true})
	require.NoError(t, onboard.Register(env.Engine))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, email := range []string{"a@example.com", "b@example.com"} {
		_, err := engine.Start(ctx, env.Engine, onboard.Onboard, onboard.OnboardInput{Email: email}, engine.StartOptions{ID: "onboard:" + email})
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		var n int
		return env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&n) == nil && n == 2
	}, 20*time.Second, 5*time.Millisecond, "both runs sleep their week")
	db := env.Pool.Config().ConnString()

	out, code := run(t, onboard.Register, "check", "--db", db)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok: 2 open runs replay against this build")

	out, code = run(t, registerSwapped, "check", "--db", db)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "DIVERGES  onboard:a@example.com")
	require.Contains(t, out, "DIVERGES  onboard:b@example.com")
	require.Contains(t, out, "2 of 2 open runs do not replay against this build: do not deploy it")

	out, code = run(t, onboard.Register, "trace", "--db", db, "onboard:a@example.com", "--until", "9")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "timer (seq 4)", "the run waits for its week")

	_, code = run(t, onboard.Register, "check", "--since", "yesterday")
	require.Equal(t, 2, code)
}

func TestEncryptedRunsReplayWithTheCodec(t *testing.T) {
	t.Parallel()
	c, err := codec.AESGCM(bytes.Repeat([]byte{7}, 32))
	require.NoError(t, err)
	env := durabletest.New(t, durabletest.Options{Store: durabletest.Postgres, ManualClock: true, Engine: engine.Options{Codec: c}})
	require.NoError(t, onboard.Register(env.Engine))
	env.Run()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = engine.Start(ctx, env.Engine, onboard.Onboard, onboard.OnboardInput{Email: "c@example.com"}, engine.StartOptions{ID: "onboard:c"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return env.Pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers").Scan(&n) == nil && n == 1
	}, 20*time.Second, 5*time.Millisecond, "the run sleeps its week")
	db := env.Pool.Config().ConnString()
	withCodec := func(args ...string) (string, int) {
		var out bytes.Buffer
		code := durablecli.Run(ctx, args, &out, &out, onboard.Register, durablecli.WithCodec(c))
		return out.String(), code
	}

	out, code := withCodec("check", "--db", db)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "ok: 1 open runs replay")
	out, code = run(t, onboard.Register, "check", "--db", db)
	require.Equal(t, 1, code, "without the codec the payloads cannot be read: %s", out)
	require.Contains(t, out, "Codec")

	// A history exported as stored (the durable CLI has no key) holds the
	// envelopes; replaying it from the file needs the codec too.
	plain, err := env.Engine.ExportHistory(ctx, "onboard:c")
	require.NoError(t, err)
	stored := plain
	stored.Events, err = postgres.New(env.Pool).ListEvents(ctx, plain.RunID, 0)
	require.NoError(t, err)
	require.True(t, codec.IsWrapped(stored.Events[0].Attributes.(history.WorkflowStarted).Input), "the input is stored encrypted")
	file := filepath.Join(t.TempDir(), "history.json")
	f, err := os.Create(file)
	require.NoError(t, err)
	require.NoError(t, history.Export(f, stored))
	require.NoError(t, f.Close())

	out, code = withCodec("trace", "--file", file)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "1  ->  WorkflowStarted(Onboard)")
	require.NotContains(t, out, "DIVERGES")
	out, code = run(t, onboard.Register, "trace", "--file", file)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, "Codec")
}

package chaos_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/chaos"
)

func TestMain(m *testing.M) {
	if chaos.IsWorker() {
		os.Exit(chaos.WorkerMain())
	}
	goleak.VerifyTestMain(m)
}

// TestShortMode runs the whole rig briefly: worker kills (one and all),
// pauses past the lease, PostgreSQL stops (fast and immediate), killed
// connections and an upgrade of the workflow code, with signals racing
// closing tasks, texts PostgreSQL cannot hold, code that never yields and
// an engine with the wrong payload key; then checks that nothing was lost
// and that every kind of fault and of workload happened.
func TestShortMode(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	o := chaos.ShortOptions()
	// The logs are kept when the test fails.
	dir, err := os.MkdirTemp("", "durable-chaos-")
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	o.Dir = dir
	o.Logf = t.Logf
	rep, err := chaos.Run(ctx, o)
	require.NoError(t, err)
	t.Log("\n" + rep.Table())
	t.Log(rep.JSON())
	require.Empty(t, rep.Violations, "the rig found violations; logs in %s", rep.Dir)
	require.Positive(t, rep.Kills, "no single worker was killed")
	require.Positive(t, rep.KillAlls, "the workers were never all killed at once")
	require.Positive(t, rep.TargetedPauses, "no worker was paused while it held claims")
	require.Positive(t, rep.StaleWrites, "fencing refused no write: the pauses made no zombies")
	require.Positive(t, rep.PGStopsFast, "PostgreSQL was never stopped with -m fast")
	require.Positive(t, rep.PGStopsImmediate, "PostgreSQL was never stopped with -m immediate")
	require.Positive(t, rep.ConnectionsKilled, "no connection was killed")
	require.GreaterOrEqual(t, rep.Workflows, o.Workflows)
	require.Positive(t, rep.Upgrades, "the workers were never upgraded")
	require.Positive(t, rep.UpgradedMidRun, "no versioned run was upgraded mid-run")
	require.Positive(t, rep.SpinsTerminated, "no run of code that never yields was terminated")
	require.Positive(t, rep.WrongKeySignals, "no signal came from an engine with the wrong key")
	require.Positive(t, rep.WrongKeyRefused, "no wrong-key signal was refused with engine.ErrCodecMismatch")
	require.Positive(t, rep.SignalsAccepted, "no signal reached a Drain run")
	require.Positive(t, rep.BadTextRuns, "no run failed with a text PostgreSQL cannot hold")
	require.Positive(t, rep.OutcomesChecked, "the database showed no outcome to check")
}

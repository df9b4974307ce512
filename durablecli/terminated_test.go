package durablecli_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/examples/onboarding/onboard"
	"github.com/durable-go/durable/history"
)

func TestTraceOfATerminatedRun(t *testing.T) {
	t.Parallel()
	f, err := os.Open(nudged)
	require.NoError(t, err)
	h, err := history.Import(f)
	require.NoError(t, f.Close())
	require.NoError(t, err)
	// Terminated after the account was provisioned: the welcome email the
	// code schedules next was never recorded.
	h.Events = append(h.Events[:5:5], history.Event{ID: 6, Time: h.Events[4].Time, Attributes: history.WorkflowTerminated{Reason: "stuck"}})
	file := filepath.Join(t.TempDir(), "terminated.json")
	out, err := os.Create(file)
	require.NoError(t, err)
	require.NoError(t, history.Export(out, h))
	require.NoError(t, out.Close())

	got, code := run(t, onboard.Register, "trace", "--file", file)
	require.Equal(t, 0, code, got)
	require.Contains(t, got, "6  ->  WorkflowTerminated: stuck")
	require.NotContains(t, got, "DIVERGES")

	got, code = run(t, onboard.Register, "trace", "--file", file, "--until", "6")
	require.Equal(t, 0, code, got)
	require.Contains(t, got, "stopped after event 6; the run waits for:\n  nothing")
}

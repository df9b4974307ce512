package main

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
)

// did counts the output lines in which the activity did something: the
// services' lines, indented, which start with the activity's name.
func did(out, act string) int {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "  "+act+" ") {
			n++
		}
	}
	return n
}

// recorded reads, through an engine on the database dsn, the status of
// the workflow's run and, per activity, its ActivityCompleted events.
func recorded(ctx context.Context, t *testing.T, dsn, workflowID string) (status string, counts map[string]int) {
	t.Helper()
	e, err := engine.Open(ctx, dsn, engine.Options{SkipMigrate: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	defer e.Close()
	info, err := e.Describe(ctx, workflowID)
	require.NoError(t, err)
	r, err := engine.GetRun[any](ctx, e, workflowID)
	require.NoError(t, err)
	events, err := r.History(ctx)
	require.NoError(t, err)
	names, counts := map[int64]string{}, map[string]int{}
	for _, ev := range events {
		switch a := ev.Attributes.(type) {
		case history.ActivityScheduled:
			names[a.Seq] = a.Activity
		case history.ActivityCompleted:
			counts[names[a.Seq]]++
		}
	}
	return string(info.Status), counts
}

// databases are the stores the program's tests run on: a fresh Postgres
// database, and a SQLite file.
func databases(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"postgres": func(t *testing.T) string { return pgtest.Database(t) },
		"sqlite":   func(t *testing.T) string { return filepath.Join(t.TempDir(), "orders.db") },
	}
}

func TestOrderSagaProgram(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name       string
		args       []string
		wantStatus string
		want       []string
		wantCounts map[string]int
	}{
		{
			name:       "ships",
			wantStatus: "completed",
			want:       []string{"order T-1 shipped: reservation res_"},
			wantCounts: map[string]int{"ReserveInventory": 1, "ChargePayment": 1, "Ship": 1},
		},
		{
			name:       "fail-ship compensates",
			args:       []string{"-fail-ship"},
			wantStatus: "failed",
			want: []string{
				"Ship             failed for good (permanent): carrier does not ship to AQ",
				"RefundPayment    completed (attempt 1)  <- compensation",
				"ReleaseInventory completed (attempt 1)  <- compensation",
				"order T-1 failed: activity Ship failed after 1 attempt(s) (permanent): carrier does not ship to AQ; compensated",
				"the failed run is kept as dead letter 1: durable dlq show 1",
			},
			wantCounts: map[string]int{"ReserveInventory": 1, "ChargePayment": 1, "RefundPayment": 1, "ReleaseInventory": 1, "NotifyCustomer": 1},
		},
	} {
		for store, database := range databases(t) {
			t.Run(store+"/"+tt.name, func(t *testing.T) {
				t.Parallel()
				url := database(t)
				out := &syncbuf.Buffer{}
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				require.NoError(t, run(ctx, append([]string{"-db", url, "-order", "T-1"}, tt.args...), out))
				got := out.String()
				require.Contains(t, got, "started workflow order:T-1")
				for _, w := range tt.want {
					require.Contains(t, got, w)
				}
				if tt.wantStatus == "failed" {
					require.Less(t, strings.Index(got, "  RefundPayment "), strings.Index(got, "  ReleaseInventory "), "refund first, then release")
				}

				status, counts := recorded(ctx, t, url, "order:T-1")
				require.Equal(t, tt.wantStatus, status)
				require.Equal(t, tt.wantCounts, counts)
			})
		}
	}
}

// TestCrashWhileCompensatingResumesOnce runs the program as a real process
// that exits (status 3) right after the first compensation completed, then
// runs it again: the second process finishes compensating, and each
// compensation completed once, by the database and by the services' output.
func TestCrashWhileCompensatingResumesOnce(t *testing.T) {
	t.Parallel()
	bin := filepath.Join(t.TempDir(), "ordersaga")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", msg)
	for store, database := range databases(t) {
		t.Run(store, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			crashWhileCompensating(ctx, t, bin, database(t))
		})
	}
}

// crashWhileCompensating is TestCrashWhileCompensatingResumesOnce on the
// database url.
func crashWhileCompensating(ctx context.Context, t *testing.T, bin, url string) {

	first, err := exec.CommandContext(ctx, bin, "-db", url, "-order", "C-1", "-crash-after", "1").Output()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "the first process crashes: %v\n%s", err, first)
	require.Equal(t, 3, exit.ExitCode(), "%s", first)
	require.Contains(t, string(first), "CRASH (simulated): exit 3 after 1 compensation(s) completed, as ReleaseInventory was about to start")
	require.Equal(t, 1, did(string(first), "RefundPayment"))
	require.Zero(t, did(string(first), "ReleaseInventory"))

	second, err := exec.CommandContext(ctx, bin, "-db", url, "-order", "C-1").Output()
	require.NoError(t, err, "%s", second)
	require.Contains(t, string(second), "resuming workflow order:C-1")
	require.Contains(t, string(second), "order C-1 failed: activity Ship failed after 1 attempt(s) (permanent): carrier does not ship to AQ; compensated")

	both := string(first) + string(second)
	for _, act := range []string{"ReserveInventory", "ChargePayment", "Ship", "RefundPayment", "ReleaseInventory", "NotifyCustomer"} {
		require.Equal(t, 1, did(both, act), "%s ran once across both processes:\n%s", act, both)
	}
	status, counts := recorded(ctx, t, url, "order:C-1")
	require.Equal(t, "failed", status)
	require.Equal(t, map[string]int{"ReserveInventory": 1, "ChargePayment": 1, "RefundPayment": 1, "ReleaseInventory": 1, "NotifyCustomer": 1},
		counts, "each completed step and compensation is recorded once, in the one run the second process resumed (Ship failed)")
}

package main

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

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

// completions counts, per activity, the ActivityCompleted events of every
// run of the workflow.
func completions(ctx context.Context, t *testing.T, pool *pgxpool.Pool, workflowID string) map[string]int {
	t.Helper()
	rows, err := pool.Query(ctx, `
		SELECT s.attributes->>'activity', count(*)::int
		FROM durable_runs r
		JOIN durable_events c ON c.run_id = r.run_id AND c.type = 'activity_completed'
		JOIN durable_events s ON s.run_id = r.run_id AND s.type = 'activity_scheduled'
		                     AND s.attributes->'seq' = c.attributes->'seq'
		WHERE r.workflow_id = $1
		GROUP BY 1`, workflowID)
	require.NoError(t, err)
	counts := map[string]int{}
	var act string
	var n int
	_, err = pgx.ForEachRow(rows, []any{&act, &n}, func() error {
		counts[act] = n
		return nil
	})
	require.NoError(t, err)
	return counts
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
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
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url := pgtest.Database(t)
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

			pool := newPool(t, url)
			var status string
			require.NoError(t, pool.QueryRow(ctx, `SELECT status FROM durable_runs WHERE workflow_id = 'order:T-1'`).Scan(&status))
			require.Equal(t, tt.wantStatus, status)
			require.Equal(t, tt.wantCounts, completions(ctx, t, pool, "order:T-1"))
		})
	}
}

// TestCrashWhileCompensatingResumesOnce runs the program as a real process
// that exits (status 3) right after the first compensation completed, then
// runs it again: the second process finishes compensating, and each
// compensation completed once, by the database and by the services' output.
func TestCrashWhileCompensatingResumesOnce(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin := filepath.Join(t.TempDir(), "ordersaga")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	msg, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", msg)
	url := pgtest.Database(t)

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
	pool := newPool(t, url)
	require.Equal(t, map[string]int{"ReserveInventory": 1, "ChargePayment": 1, "RefundPayment": 1, "ReleaseInventory": 1, "NotifyCustomer": 1},
		completions(ctx, t, pool, "order:C-1"), "each completed step and compensation is recorded once (Ship failed)")
	var runs int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM durable_runs WHERE workflow_id = 'order:C-1'`).Scan(&runs))
	require.Equal(t, 1, runs, "the second process resumed the crashed run")
}

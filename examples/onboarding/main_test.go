package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/syncbuf"
)

// steps lists the activities named in the example's output, in order.
func steps(out string) []string {
	var s []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "started") && !strings.HasPrefix(line, "done") && !strings.HasPrefix(f[0], "...") {
			s = append(s, f[0])
		}
	}
	return s
}

func TestOnboardingProgramEndToEnd(t *testing.T) {
	t.Parallel()
	url := pgtest.Database(t)
	out := &syncbuf.Buffer{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, run(ctx, []string{"-db", url, "-week", "300ms", "-email", "grace@example.com"}, out))
	got := out.String()
	require.Contains(t, got, "started workflow onboard:grace@example.com")
	require.Equal(t, []string{"ChargeCard", "ProvisionAccount", "SendWelcomeEmail", "HasCompletedSetup", "SendNudgeEmail"}, steps(got))
	require.Regexp(t, regexp.MustCompile(`done: account acct_[0-9a-f]{8}, payment pay_[0-9a-f]{8}, nudged true`), got)

	// The run is recorded: completed, with its whole history.
	pool := newPool(t, url)
	var status string
	var events int
	require.NoError(t, pool.QueryRow(ctx, `
		SELECT r.status, (SELECT count(*) FROM durable_events e WHERE e.run_id = r.run_id)
		FROM durable_runs r WHERE r.workflow_id = 'onboard:grace@example.com'`).Scan(&status, &events))
	require.Equal(t, "completed", status)
	require.Equal(t, 1+5*2+2+1, events, "started, five activities scheduled and completed, timer started and fired, completed")
}

func newPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

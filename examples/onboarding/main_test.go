package main

import (
	"context"
	"path/filepath"
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
		if f := strings.Fields(line); len(f) > 0 && !strings.HasPrefix(line, "started") && !strings.HasPrefix(line, "done") &&
			!strings.HasPrefix(line, "database:") && !strings.HasPrefix(line, "resuming") && !strings.HasPrefix(line, "stopped") && !strings.HasPrefix(f[0], "...") {
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

// On a SQLite file (the default when DATABASE_URL is unset), the program
// runs the flow; stopped while the run sleeps out its week and started
// again, it resumes the same run, and no completed step runs again.
//
// Not parallel: onboard.Configure sets where every run's steps print, and
// another test's would print here.
func TestOnboardingOnSQLiteResumesAfterAStop(t *testing.T) {
	db := filepath.Join(t.TempDir(), "dev.db")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	first := &syncbuf.Buffer{}
	ctx1, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- run(ctx1, []string{"-db", db, "-week", "4s", "-email", "linus@example.com"}, first) }()
	require.Eventually(t, func() bool { return strings.Contains(first.String(), "sleeping durably") },
		30*time.Second, 10*time.Millisecond, "the run sleeps out its week")
	stop()
	require.NoError(t, <-done)
	require.Contains(t, first.String(), "database: SQLite file "+db)
	require.Contains(t, first.String(), "started workflow onboard:linus@example.com")
	require.Contains(t, first.String(), "stopped; run again")
	require.Equal(t, []string{"ChargeCard", "ProvisionAccount", "SendWelcomeEmail"}, steps(first.String()))

	second := &syncbuf.Buffer{}
	require.NoError(t, run(ctx, []string{"-db", db, "-week", "4s", "-email", "linus@example.com"}, second))
	got := second.String()
	require.Contains(t, got, "resuming workflow onboard:linus@example.com")
	require.Equal(t, []string{"HasCompletedSetup", "SendNudgeEmail"}, steps(got), "only the steps after the sleep")
	require.Regexp(t, regexp.MustCompile(`done: account acct_[0-9a-f]{8}, payment pay_[0-9a-f]{8}, nudged true`), got)
}

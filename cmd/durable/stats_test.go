package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/pgtest"
)

// TestStats adds to the dead-letter fixture, directly in the database: on
// queue q five activity tasks (three ready, the oldest for 5 minutes, one
// running, one due in an hour) and on queue default a workflow task ready for
// 2 minutes. It dates ship-1's dead-lettering and order-1's whole run
// 2 hours back, out of the default 1h window. The fixture brings one pending
// timer (Hold's, on default), 2 job and 2 workflow dead letters, and in
// workflows 2 Reserve completions and 2 Charge failures.
func TestStats(t *testing.T) {
	t.Parallel()
	f := dlqSetup(t)
	ctx := t.Context()
	_, err := f.pool.Exec(ctx, `
INSERT INTO durable_activity_tasks (activity, queue, input, idempotency_key, lease_ms, run_after, locked_by, locked_until, created_at)
VALUES ('Ship', 'q', '0', 'q-1', 60000, now() - interval '5 minutes', NULL, NULL, now()),
       ('Ship', 'q', '0', 'q-2', 60000, now() - interval '1 minute', NULL, NULL, now()),
       ('Ship', 'q', '0', 'q-3', 60000, now(), NULL, NULL, now()),
       ('Ship', 'q', '0', 'q-4', 60000, now() + interval '10 minutes', 'host:1', now() + interval '10 minutes', now()),
       ('Ship', 'q', '0', 'q-5', 60000, now() + interval '1 hour', NULL, NULL, now())`)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `INSERT INTO durable_workflow_tasks (run_id, queue, run_after) VALUES ($1, 'default', now() - interval '2 minutes')`, f.holdRun)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE durable_dead_letters SET dead_lettered_at = now() - interval '10 minutes' WHERE id = $1`, f.ship1)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE durable_events SET created_at = created_at - interval '2 hours' WHERE run_id = $1`, f.order1Run)
	require.NoError(t, err)
	_, err = f.pool.Exec(ctx, `UPDATE durable_runs SET created_at = created_at - interval '2 hours' WHERE run_id = $1`, f.order1Run)
	require.NoError(t, err)

	t.Run("JSON", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "stats")
		requireCode(t, exitOK, r)
		var s statsOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		require.WithinDuration(t, time.Now(), s.Now, time.Minute, "now is the database's clock")
		require.InDelta(t, 3600, s.WindowSeconds, 0)

		require.Len(t, s.Queues, 2, r.stdout)
		def, q := s.Queues[0], s.Queues[1]
		require.Equal(t, "default", def.Queue)
		requireAge(t, def.WorkflowTasks.OldestReadyAgeSeconds, 2*time.Minute, "default's oldest ready workflow task")
		def.WorkflowTasks.OldestReadyAt, def.WorkflowTasks.OldestReadyAgeSeconds = nil, nil
		require.Equal(t, taskStatsOutput{Ready: 1}, def.WorkflowTasks)
		require.Equal(t, taskStatsOutput{}, def.ActivityTasks)
		require.Equal(t, 1, def.TimersPending)
		require.NotNil(t, def.NextTimerAt)
		require.WithinDuration(t, s.Now.Add(time.Hour), *def.NextTimerAt, 5*time.Minute, "Hold's timer")

		require.Equal(t, "q", q.Queue)
		require.Equal(t, taskStatsOutput{}, q.WorkflowTasks)
		requireAge(t, q.ActivityTasks.OldestReadyAgeSeconds, 5*time.Minute, "q's oldest ready activity task")
		require.NotNil(t, q.ActivityTasks.OldestReadyAt)
		require.WithinDuration(t, s.Now.Add(-time.Duration(*q.ActivityTasks.OldestReadyAgeSeconds*float64(time.Second))),
			*q.ActivityTasks.OldestReadyAt, time.Millisecond, "the age is now minus the time")
		q.ActivityTasks.OldestReadyAt, q.ActivityTasks.OldestReadyAgeSeconds = nil, nil
		require.Equal(t, taskStatsOutput{Ready: 3, Running: 1, Waiting: 1}, q.ActivityTasks)
		require.Zero(t, q.TimersPending)
		require.Nil(t, q.NextTimerAt)

		require.Len(t, s.DeadLetters, 2)
		require.Equal(t, "job", s.DeadLetters[0].Kind)
		require.Equal(t, 2, s.DeadLetters[0].Pending)
		requireAge(t, s.DeadLetters[0].OldestAgeSeconds, 10*time.Minute, "the oldest job dead letter")
		require.Equal(t, "workflow", s.DeadLetters[1].Kind)
		require.Equal(t, 2, s.DeadLetters[1].Pending)
		require.NotNil(t, s.DeadLetters[1].OldestAgeSeconds)

		require.Len(t, s.Activities, 2, "jobs (Ship) keep no history: %s", r.stdout)
		charge, reserve := s.Activities[0], s.Activities[1]
		require.Equal(t, activityStatsOutput{Activity: "Charge", Failed: 1, FailureRate: 1}, charge, "order-1's failure is out of the window")
		require.Equal(t, "Reserve", reserve.Activity)
		require.Equal(t, 1, reserve.Completed)
		require.Zero(t, reserve.Failed)
		require.Zero(t, reserve.FailureRate)
		require.NotNil(t, reserve.MeanSeconds)
		require.GreaterOrEqual(t, *reserve.MeanSeconds, 0.0)
		require.Less(t, *reserve.MeanSeconds, 60.0)
		require.Equal(t, reserve.MeanSeconds, reserve.P50Seconds, "one sample")
		require.Equal(t, reserve.MeanSeconds, reserve.P95Seconds, "one sample")
	})

	t.Run("Window", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "stats", "--window", "3h")
		requireCode(t, exitOK, r)
		var s statsOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		require.InDelta(t, 3*3600, s.WindowSeconds, 0)
		require.Len(t, s.Activities, 2)
		require.Equal(t, activityStatsOutput{Activity: "Charge", Failed: 2, FailureRate: 1}, s.Activities[0])
		require.Equal(t, 2, s.Activities[1].Completed)
		require.Zero(t, s.Activities[1].Failed)
		require.NotNil(t, s.Activities[1].P95Seconds)
		require.GreaterOrEqual(t, *s.Activities[1].P95Seconds, *s.Activities[1].P50Seconds)

		require.False(t, s.ActivitiesCapped)
		require.True(t, s.Now.Add(-3*time.Hour).Equal(s.ActivitiesSince), "since %s", s.ActivitiesSince)

		r = durable(t, f.db, "--json", "stats", "--window", "1d")
		requireCode(t, exitOK, r)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		require.InDelta(t, 24*3600, s.WindowSeconds, 0)
	})

	// Of the window's four outcomes, the latest two only: it says so, and
	// since when.
	t.Run("MaxOutcomes", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "stats", "--window", "3h", "--max-outcomes", "2")
		requireCode(t, exitOK, r)
		var s statsOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		require.True(t, s.ActivitiesCapped)
		require.True(t, s.ActivitiesSince.After(s.Now.Add(-3*time.Hour)), "since %s", s.ActivitiesSince)
		n := 0
		for _, a := range s.Activities {
			n += a.Completed + a.Failed
		}
		require.Equal(t, 2, n, r.stdout)

		r = durable(t, f.db, "stats", "--window", "3h", "--max-outcomes", "2")
		requireCode(t, exitOK, r)
		require.Regexp(t, `\nActivities that ended in the last 3h: the latest outcomes only, since \S+ \(\S+ ago; --max-outcomes reads more\)\n`, r.stdout)

		r = durable(t, f.db, "stats", "--max-outcomes", "0")
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, "--max-outcomes 0: want a positive number")
	})

	t.Run("Text", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "stats")
		requireCode(t, exitOK, r)
		for _, re := range []string{
			`^As of \S+ \(database clock\)\n`,
			`\nWorkflow tasks\n  QUEUE\s+READY\s+RUNNING\s+WAITING\s+OLDEST READY\n  default\s+1\s+0\s+0\s+2m\d+s\n  q\s+0\s+0\s+0\s+-\n`,
			`\nActivity tasks\n  QUEUE\s+READY\s+RUNNING\s+WAITING\s+OLDEST READY\n  default\s+0\s+0\s+0\s+-\n  q\s+3\s+1\s+1\s+5m\d+s\n`,
			// Hold's timer is due an hour after the fixture's start, to the
			// second: in 59m59s, or in 1h0m0s if the test got here in
			// under half a second.
			`\nTimers\n  QUEUE\s+PENDING\s+NEXT FIRES\n  default\s+1\s+\S+ \(in (\d+m\d+s|1h0m0s)\)\n  q\s+0\s+-\n`,
			`\nDead letters not yet redriven\n  KIND\s+PENDING\s+OLDEST\n  job\s+2\s+10m\d+s\n  workflow\s+2\s+\S+\n`,
			`\nActivities that ended in the last 1h\n  ACTIVITY\s+COMPLETED\s+FAILED\s+FAILURE RATE\s+MEAN\s+P50\s+P95\n` +
				`  Charge\s+0\s+1\s+100\.0%\s+-\s+-\s+-\n  Reserve\s+1\s+0\s+0\.0%\s+\S+\s+\S+\s+\S+\n$`,
		} {
			require.Regexp(t, re, r.stdout)
		}
		require.Empty(t, r.stderr)
	})
}

func TestStatsEmpty(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	r := durable(t, db, "stats", "--window", "90m")
	requireCode(t, exitOK, r)
	require.Contains(t, r.stdout, "\nQueues: no tasks or timers\n")
	require.Regexp(t, `\n  job\s+0\s+-\n  workflow\s+0\s+-\n`, r.stdout)
	require.Contains(t, r.stdout, "\nActivities: none ended in the last 90m\n")

	r = durable(t, db, "--json", "stats")
	requireCode(t, exitOK, r)
	var s statsOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
	require.NotNil(t, s.Queues, "empty lists are [], not null")
	require.Empty(t, s.Queues)
	require.NotNil(t, s.Activities)
	require.Empty(t, s.Activities)
	require.Equal(t, []deadLetterStatsOutput{{Kind: "job"}, {Kind: "workflow"}}, s.DeadLetters)
}

// requireAge checks an age in seconds is about want: at least want, and
// less than a minute more (the time the test took).
func requireAge(t *testing.T, got *float64, want time.Duration, what string) {
	t.Helper()
	require.NotNil(t, got, what)
	require.GreaterOrEqual(t, *got, want.Seconds(), what)
	require.Less(t, *got, (want + time.Minute).Seconds(), what)
}

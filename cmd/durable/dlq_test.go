package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// dlqSecret is in every dead letter's payload: no output may show it unasked.
const dlqSecret = "card-4242-secret"

// Order reserves stock, then charges a card, which always fails for good.
func Order(ctx workflow.Context, sku string) (string, error) {
	if _, err := workflow.ExecuteActivity(ctx, Reserve, sku).Get(ctx); err != nil {
		return "", err
	}
	return workflow.ExecuteActivity(ctx, Charge, sku).Get(ctx)
}

func Reserve(_ context.Context, sku string) (string, error) { return "res-" + sku, nil }

func Charge(context.Context, string) (string, error) {
	return "", activity.Permanent(errors.New("card declined"))
}

// Ship is a job that always fails for good.
func Ship(context.Context, string) (string, error) {
	return "", activity.Permanent(errors.New("invalid address"))
}

// Hold waits an hour.
func Hold(ctx workflow.Context, _ int) (int, error) { return 0, workflow.Sleep(ctx, time.Hour) }

// dlqFixture is a database with four dead letters, oldest first: the jobs
// ship-1 and ship-2 (Ship, a permanent error), then the workflows order-1
// and order-2 (Order, whose Reserve completed and Charge failed). order-2
// has an open run again: Hold, with a pending timer. No worker runs.
type dlqFixture struct {
	db   string
	pool *pgxpool.Pool
	// The dead letters' IDs.
	ship1, ship2, order1, order2 int64
	// order1Run and order2Run are the failed runs; holdRun is order-2's open run.
	order1Run, order2Run, holdRun string
}

func dlqSetup(t *testing.T) dlqFixture {
	t.Helper()
	pool, db := pgtest.PoolURL(t)
	e, err := engine.New(pool, engine.Options{
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Order, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Hold, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Reserve, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Charge, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Ship, activity.Options{}))

	runCtx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	defer func() {
		stop()
		require.NoError(t, <-done)
	}()

	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	f := dlqFixture{db: db, pool: pool}
	// One at a time, so that the dead letters' IDs come in this order.
	for i, key := range []string{"ship-1", "ship-2"} {
		_, err := engine.Enqueue(ctx, e, Ship, dlqSecret, engine.JobOptions{Key: key})
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
			return err == nil && len(ds) == i+1
		}, 30*time.Second, 20*time.Millisecond, "job %s fails for good and is dead-lettered", key)
	}
	for _, id := range []string{"order-1", "order-2"} {
		r, err := engine.Start(ctx, e, Order, dlqSecret, engine.StartOptions{ID: id})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		var wfErr *engine.WorkflowError
		require.ErrorAs(t, err, &wfErr)
		if id == "order-1" {
			f.order1Run = r.RunID
		} else {
			f.order2Run = r.RunID
		}
	}
	hold, err := engine.Start(ctx, e, Hold, 0, engine.StartOptions{ID: "order-2"})
	require.NoError(t, err)
	require.False(t, hold.Existing, "order-2's Order run failed: this is a new run")
	f.holdRun = hold.RunID
	require.Eventually(t, func() bool {
		var n int
		return pool.QueryRow(ctx, "SELECT count(*) FROM durable_timers WHERE run_id = $1", hold.RunID).Scan(&n) == nil && n == 1
	}, 30*time.Second, 20*time.Millisecond, "Hold's workflow task starts its timer")

	ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
	require.NoError(t, err)
	require.Len(t, ds, 4)
	f.order2, f.order1, f.ship2, f.ship1 = ds[0].ID, ds[1].ID, ds[2].ID, ds[3].ID
	require.Equal(t, "order-2", ds[0].WorkflowID)
	require.Equal(t, "order-1", ds[1].WorkflowID)
	require.Equal(t, "ship-2", ds[2].IdempotencyKey)
	require.Equal(t, "ship-1", ds[3].IdempotencyKey)
	return f
}

// id formats a dead-letter ID as an argument.
func id(n int64) string { return strconv.FormatInt(n, 10) }

func TestDLQ(t *testing.T) {
	t.Parallel()
	f := dlqSetup(t)

	t.Run("List", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "dlq", "list")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 5, r.stdout)
		require.Regexp(t, `^ID\s+KIND\s+TYPE\s+ATTEMPTS\s+ERROR CLASS\s+LAST ERROR\s+FIRST FAILED\s+DEAD-LETTERED\s+REDRIVEN$`, lines[0])
		require.Regexp(t, `^`+id(f.order2)+`\s+workflow\s+Order\s+1\s+\S+\s+.*card declined.*\s+\S+\s+\S+\s+-$`, lines[1], "newest first")
		require.Regexp(t, `^`+id(f.order1)+`\s+workflow\s+Order\s`, lines[2])
		require.Regexp(t, `^`+id(f.ship2)+`\s+job\s+Ship\s+1\s+permanent\s+invalid address\s+\S+\s+\S+\s+-$`, lines[3])
		require.Regexp(t, `^`+id(f.ship1)+`\s+job\s+Ship\s`, lines[4])
		require.NotContains(t, r.stdout, dlqSecret)
		require.Empty(t, r.stderr)

		r = durable(t, f.db, "dlq", "list", "--limit", "2")
		requireCode(t, exitOK, r)
		require.Len(t, strings.Split(strings.TrimSpace(r.stdout), "\n"), 3, r.stdout)
		require.Contains(t, r.stderr, "showing the newest 2 dead letters", "a full page says there may be more")
	})

	t.Run("ListFilters", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			want []int64
		}{
			{"All", nil, []int64{f.order2, f.order1, f.ship2, f.ship1}},
			{"Jobs", []string{"--kind", "job"}, []int64{f.ship2, f.ship1}},
			{"Workflows", []string{"--kind", "workflow"}, []int64{f.order2, f.order1}},
			{"Type", []string{"--type", "Ship"}, []int64{f.ship2, f.ship1}},
			{"KindAndType", []string{"--kind", "workflow", "--type", "Ship"}, []int64{}},
			{"IncludingRedriven", []string{"--all", "--kind", "job"}, []int64{f.ship2, f.ship1}},
			{"Limit", []string{"--limit", "1"}, []int64{f.order2}},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, f.db, append([]string{"--json", "dlq", "list"}, tt.args...)...)
				requireCode(t, exitOK, r)
				var ds []deadLetterOutput
				require.NoError(t, json.Unmarshal([]byte(r.stdout), &ds), r.stdout)
				require.NotNil(t, ds, "an empty list is [], not null")
				got := []int64{}
				for _, d := range ds {
					got = append(got, d.ID)
					require.Nil(t, d.Payload, "list never prints payloads")
				}
				require.Equal(t, tt.want, got)
				require.NotContains(t, r.stdout, dlqSecret)
			})
		}
	})

	t.Run("ListEmptyText", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "dlq", "list", "--type", "Nope")
		requireCode(t, exitOK, r)
		require.Equal(t, "no dead letters waiting to be redriven\n", r.stdout)
	})

	t.Run("ShowJob", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "dlq", "show", id(f.ship1))
		requireCode(t, exitOK, r)
		for _, re := range []string{
			`(?m)^ID\s+` + id(f.ship1) + `$`,
			`(?m)^Kind\s+job$`,
			`(?m)^Type\s+Ship$`,
			`(?m)^Queue\s+default$`,
			`(?m)^Idempotency key\s+ship-1$`,
			`(?m)^Attempts\s+1$`,
			`(?m)^Error class\s+permanent$`,
			`(?m)^First failed\s+\S+$`,
			`(?m)^Dead-lettered\s+\S+$`,
			`(?m)^Redriven\s+-$`,
			`(?m)^Options\s+\{.*\}$`,
			`\nLast error:\n  invalid address\n`,
			`durable dlq redrive ` + id(f.ship1),
		} {
			require.Regexp(t, re, r.stdout)
		}
		require.NotContains(t, r.stdout, "Workflow ID")
		require.NotContains(t, r.stdout, "Payload")
		require.NotContains(t, r.stdout, dlqSecret, "no payloads unasked")

		r = durable(t, f.db, "dlq", "show", id(f.ship1), "--payloads")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Payload\s+"`+dlqSecret+`"$`, r.stdout)
	})

	t.Run("ShowWorkflow", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "dlq", "show", id(f.order1))
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Kind\s+workflow$`, r.stdout)
		require.Regexp(t, `(?m)^Type\s+Order$`, r.stdout)
		require.Regexp(t, `(?m)^Workflow ID\s+order-1$`, r.stdout)
		require.Regexp(t, `(?m)^Failed run ID\s+`+f.order1Run+`$`, r.stdout)
		require.Contains(t, r.stdout, "card declined")
		require.NotContains(t, r.stdout, "Idempotency key")
		require.NotContains(t, r.stdout, dlqSecret)
	})

	t.Run("ShowJSON", func(t *testing.T) {
		t.Parallel()
		r := durable(t, f.db, "--json", "dlq", "show", id(f.ship2))
		requireCode(t, exitOK, r)
		require.NotContains(t, r.stdout, dlqSecret)
		var d deadLetterOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, f.ship2, d.ID)
		require.Equal(t, "job", d.Kind)
		require.Equal(t, "Ship", d.Type)
		require.Equal(t, "default", d.Queue)
		require.Equal(t, "ship-2", d.IdempotencyKey)
		require.Equal(t, 1, d.Attempts)
		require.Equal(t, "permanent", d.ErrorClass)
		require.Equal(t, "invalid address", d.LastError)
		require.NotEmpty(t, d.Options)
		require.False(t, d.FirstFailedAt.IsZero())
		require.False(t, d.DeadLetteredAt.Before(d.FirstFailedAt))
		require.Nil(t, d.RedrivenAt)
		require.Nil(t, d.Payload)

		r = durable(t, f.db, "--json", "dlq", "show", id(f.order2), "--payloads")
		requireCode(t, exitOK, r)
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, "workflow", d.Kind)
		require.Equal(t, "order-2", d.WorkflowID)
		require.Equal(t, f.order2Run, d.RunID)
		require.JSONEq(t, `"`+dlqSecret+`"`, string(d.Payload))
	})

	t.Run("NotFound", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"Show", []string{"dlq", "show", "999999"}, `no dead letter with ID 999999: find IDs with 'durable dlq list --all'`},
			{"ShowNotANumber", []string{"dlq", "show", "abc"}, `dead-letter ID "abc" is not a positive number`},
			{"Redrive", []string{"dlq", "redrive", "999999"}, `no dead letter with ID 999999`},
			{"RedriveJSON", []string{"--json", "dlq", "redrive", "0"}, `dead-letter ID "0" is not a positive number`},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, f.db, tt.args...)
				requireCode(t, exitNotFound, r)
				require.Contains(t, r.stderr, tt.want)
				require.Empty(t, r.stdout)
			})
		}
	})
}

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	f := dlqSetup(t)
	ctx := t.Context()
	pending := func() []int64 {
		t.Helper()
		r := durable(t, f.db, "--json", "dlq", "list")
		requireCode(t, exitOK, r)
		var ds []deadLetterOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &ds), r.stdout)
		ids := []int64{}
		for _, d := range ds {
			ids = append(ids, d.ID)
		}
		return ids
	}

	// A job, by ID: its task is back with a fresh attempt budget.
	r := durable(t, f.db, "dlq", "redrive", id(f.ship1))
	requireCode(t, exitOK, r)
	require.Equal(t, "dead letter "+id(f.ship1)+" (job Ship): redriven: queued again with a fresh attempt budget\n", r.stdout)
	var attempt int
	require.NoError(t, f.pool.QueryRow(ctx,
		"SELECT attempt FROM durable_activity_tasks WHERE idempotency_key = 'ship-1' AND run_id IS NULL AND activity = 'Ship'").Scan(&attempt))
	require.Zero(t, attempt, "a fresh attempt count")

	// Twice is harmless.
	r = durable(t, f.db, "dlq", "redrive", id(f.ship1))
	requireCode(t, exitOK, r)
	require.Regexp(t, `^dead letter `+id(f.ship1)+` \(job Ship\): already redriven at \S+; nothing done\n$`, r.stdout)
	var tasks int
	require.NoError(t, f.pool.QueryRow(ctx, "SELECT count(*) FROM durable_activity_tasks").Scan(&tasks))
	require.Equal(t, 1, tasks, "the second redrive queued nothing")

	// An unknown ID among known ones: nothing is done.
	r = durable(t, f.db, "dlq", "redrive", id(f.ship2), "999999")
	requireCode(t, exitNotFound, r)
	require.Contains(t, r.stderr, "no dead letter with ID 999999")
	require.Empty(t, r.stdout)
	require.Equal(t, []int64{f.order2, f.order1, f.ship2}, pending(), "ship-2 was not redriven")

	// A job whose key a pending job holds cannot be redriven: it says so
	// and stays pending.
	e, err := engine.New(f.pool, engine.Options{SkipMigrate: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterActivity(e, Ship, activity.Options{}))
	held, err := engine.Enqueue(ctx, e, Ship, "again", engine.JobOptions{Key: "ship-2"})
	require.NoError(t, err)
	r = durable(t, f.db, "dlq", "redrive", id(f.ship2))
	requireCode(t, exitFailure, r)
	require.Equal(t, "dead letter "+id(f.ship2)+` (job Ship): not redriven: job with idempotency key "ship-2" is already pending (task `+
		id(held.ID)+"): let it finish, then redrive again\n", r.stdout)
	require.Contains(t, r.stderr, "1 dead letter(s) not redriven, left pending: "+id(f.ship2))
	require.Equal(t, []int64{f.order2, f.order1, f.ship2}, pending(), "ship-2 is still pending")
	r = durable(t, f.db, "--json", "dlq", "redrive", id(f.ship2))
	requireCode(t, exitFailure, r)
	var outs []redriveOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &outs), r.stdout)
	require.Len(t, outs, 1)
	require.False(t, outs[0].Redriven)
	require.Nil(t, outs[0].RedrivenAt)
	require.Contains(t, outs[0].NotRedriven, `job with idempotency key "ship-2" is already pending`)
	// The held job finishes (no worker runs here: it is taken away).
	_, err = f.pool.Exec(ctx, "DELETE FROM durable_activity_tasks WHERE id = $1", held.ID)
	require.NoError(t, err)

	// A workflow whose ID has an open run cannot be redriven.
	r = durable(t, f.db, "dlq", "redrive", id(f.order2))
	requireCode(t, exitFailure, r)
	require.Contains(t, r.stdout, `dead letter `+id(f.order2)+` (workflow Order, workflow ID order-2): not redriven: `+
		`workflow "order-2" has an open run `+f.holdRun+`: finish or terminate that run first`)
	require.Contains(t, r.stderr, "1 dead letter(s) not redriven, left pending: "+id(f.order2))

	// --all with a filter.
	r = durable(t, f.db, "--json", "dlq", "redrive", "--all", "--kind", "job")
	requireCode(t, exitOK, r)
	outs = nil // Unmarshal would keep fields the JSON leaves out
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &outs), r.stdout)
	require.Len(t, outs, 1)
	require.Equal(t, f.ship2, outs[0].ID)
	require.True(t, outs[0].Redriven)
	require.NotNil(t, outs[0].RedrivenAt)
	require.Empty(t, outs[0].RunID)
	require.Equal(t, []int64{f.order2, f.order1}, pending())

	// --all, oldest first: order-1 is redriven, order-2 is not and stays pending.
	r = durable(t, f.db, "dlq", "redrive", "--all")
	requireCode(t, exitFailure, r)
	m := regexp.MustCompile(`^dead letter ` + id(f.order1) + ` \(workflow Order, workflow ID order-1\): redriven: continues in run (\S+)\n` +
		`dead letter ` + id(f.order2) + ` \(workflow Order, workflow ID order-2\): not redriven: .*finish or terminate that run first.*\n` +
		`redrove 1 dead letter\(s\)\n$`).FindStringSubmatch(r.stdout)
	require.NotNil(t, m, r.stdout)
	newRun := m[1]
	require.Contains(t, r.stderr, "1 dead letter(s) not redriven, left pending: "+id(f.order2))
	require.Equal(t, []int64{f.order2}, pending())

	var (
		workflowID, status string
		charge             int
	)
	require.NoError(t, f.pool.QueryRow(ctx, "SELECT workflow_id, status FROM durable_runs WHERE run_id = $1", newRun).Scan(&workflowID, &status))
	require.Equal(t, "order-1", workflowID)
	require.Equal(t, "running", status)
	require.NoError(t, f.pool.QueryRow(ctx,
		"SELECT attempt FROM durable_activity_tasks WHERE run_id = $1 AND activity = 'Charge'", newRun).Scan(&charge))
	require.Zero(t, charge, "the failed activity is queued again")

	r = durable(t, f.db, "workflow", "describe", "order-1")
	requireCode(t, exitOK, r)
	require.Regexp(t, `(?m)^Run ID\s+`+newRun+`$`, r.stdout)
	require.Regexp(t, `(?m)^Status\s+running$`, r.stdout)

	// The redriven workflow says where it went.
	r = durable(t, f.db, "--json", "dlq", "redrive", id(f.order1))
	requireCode(t, exitOK, r)
	outs = nil
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &outs), r.stdout)
	require.Equal(t, []redriveOutput{{
		ID: f.order1, Kind: "workflow", Type: "Order", WorkflowID: "order-1", RunID: newRun, RedrivenAt: outs[0].RedrivenAt,
	}}, outs)
	require.NotNil(t, outs[0].RedrivenAt)
	r = durable(t, f.db, "dlq", "show", id(f.order1))
	requireCode(t, exitOK, r)
	require.Regexp(t, `(?m)^Redriven\s+\S+$`, r.stdout)
	require.Regexp(t, `(?m)^Redrive run ID\s+`+newRun+`$`, r.stdout)
	require.NotContains(t, r.stdout, "durable dlq redrive")

	// Nothing of this kind is left.
	r = durable(t, f.db, "dlq", "redrive", "--all", "--type", "Ship")
	requireCode(t, exitOK, r)
	require.Equal(t, "no dead letters waiting to be redriven\n", r.stdout)
	r = durable(t, f.db, "dlq", "list", "--all", "--kind", "job")
	requireCode(t, exitOK, r)
	require.Len(t, regexp.MustCompile(`(?m)^\d+\s+job\s+Ship\s.*\s\d{4}-\d\d-\d\dT\S+$`).FindAllString(r.stdout, -1), 2,
		"both jobs list a redrive time: %s", r.stdout)
}

func TestDLQUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"UnknownSubcommand", []string{"dlq", "bogus"}, `unknown command "bogus" for "durable dlq"`},
		{"BadKind", []string{"dlq", "list", "--kind", "task"}, `--kind "task": want one of job, workflow`},
		{"BadLimit", []string{"dlq", "list", "--limit", "0"}, "--limit must be at least 1"},
		{"ShowNoID", []string{"dlq", "show"}, "takes one dead-letter ID, got 0"},
		{"ShowTwoIDs", []string{"dlq", "show", "1", "2"}, "takes one dead-letter ID, got 2"},
		{"RedriveNothing", []string{"dlq", "redrive"}, "takes dead-letter IDs, or --all"},
		{"RedriveIDsAndAll", []string{"dlq", "redrive", "1", "--all"}, "give dead-letter IDs or --all, not both"},
		{"RedriveFilterWithoutAll", []string{"dlq", "redrive", "1", "--kind", "job"}, "--kind and --type select what --all redrives"},
		{"RedriveBadKind", []string{"dlq", "redrive", "--all", "--kind", "jobs"}, `--kind "jobs"`},
		{"StatsZeroWindow", []string{"stats", "--window", "0s"}, `--window "0s": want a positive duration`},
		{"StatsBadWindow", []string{"stats", "--window", "soon"}, `--window "soon"`},
		{"StatsArgs", []string{"stats", "now"}, `unknown command "now" for "durable stats"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The database is unreachable: usage is checked before connecting.
			r := durable(t, unreachable, tt.args...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tt.want)
			require.Contains(t, r.stderr, "--help' for usage")
		})
	}
}

func TestDLQAndStatsHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"Root", []string{"--help"}, []string{"dlq", "stats"}},
		{"DLQ", []string{"dlq"}, []string{"list", "show", "redrive", "fresh attempt budget"}},
		{"List", []string{"dlq", "list", "--help"}, []string{"--kind", "--type", "--all", "--limit"}},
		{"Show", []string{"help", "dlq", "show"}, []string{"--payloads"}},
		{"Redrive", []string{"dlq", "redrive", "--help"}, []string{"--all", "--kind", "--type", "finish or terminate"}},
		{"Stats", []string{"stats", "--help"}, []string{"--window", "ready", "running", "database's clock"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, "", tt.args...)
			requireCode(t, exitOK, r)
			for _, w := range tt.want {
				require.Contains(t, r.stdout, w)
			}
		})
	}
}

func TestDLQAndStatsDatabaseErrors(t *testing.T) {
	t.Parallel()
	commands := [][]string{
		{"dlq", "list"},
		{"dlq", "show", "1"},
		{"dlq", "redrive", "--all"},
		{"--json", "stats"},
	}
	for _, args := range commands {
		t.Run("Unreachable/"+strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			r := durable(t, unreachable, args...)
			requireCode(t, exitUnreachable, r)
			require.Contains(t, r.stderr, "cannot reach the database at 127.0.0.1:1/x")
			require.Empty(t, r.stdout)
		})
	}

	pool, db := pgtest.PoolURL(t)
	_, err := pool.Exec(t.Context(), "DELETE FROM durable_schema_migrations")
	require.NoError(t, err)
	for _, args := range commands {
		t.Run("SchemaBehind/"+strings.Join(args, "_"), func(t *testing.T) {
			t.Parallel()
			r := durable(t, db, args...)
			requireCode(t, exitSchema, r)
			require.Contains(t, r.stderr, "run `durable migrate`")
			require.Empty(t, r.stdout)
		})
	}
}

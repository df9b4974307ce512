package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// The commands on a SQLite file. The file is made by an engine in this
// process, which goes on running its workflows while the durable binary,
// another process, reads and changes runs on the same file: the engine
// sees the binary's changes when it polls.

// litePoll is how often the fixture's engine polls for work that another
// process (the durable binary) made ready.
const litePoll = 50 * time.Millisecond

// liteFixture is a SQLite file with, oldest first: greet-1 (Greet,
// completed); the job ship-1 (Ship, dead-lettered); order-1 (Order,
// failed and dead-lettered); nap-1 and nap-2 (Nap, a pending timer each)
// and await-1 (AwaitApproval, waiting for its "approve" signal). An engine
// runs their workflows until the test ends.
type liteFixture struct {
	path string
	// The runs' IDs.
	greetRun, orderRun, napRun, awaitRun string
	// await and nap2 are await-1's and nap-2's runs, to wait for their
	// results.
	await *engine.Run[string]
	nap2  *engine.Run[int]
	// The dead letters' IDs.
	ship, order int64
}

func liteSetup(t *testing.T) liteFixture {
	t.Helper()
	f := liteFixture{path: filepath.Join(t.TempDir(), "durable.db")}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := engine.Open(ctx, f.path, engine.Options{
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: litePoll,
	})
	require.NoError(t, err)
	// Registered before runEngine's cleanup, so it runs after: the file
	// closes once Run has returned.
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	require.NoError(t, engine.RegisterWorkflow(e, Greet, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Order, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, AwaitApproval, engine.WorkflowOptions{}))
	for _, fn := range []func(context.Context, string) (string, error){Hello, Reserve, Charge, Ship} {
		require.NoError(t, engine.RegisterActivity(e, fn, activity.Options{}))
	}
	runEngine(t, e)

	g, err := engine.Start(ctx, e, Greet, secret, engine.StartOptions{ID: "greet-1"})
	require.NoError(t, err)
	_, err = g.Result(ctx)
	require.NoError(t, err)
	f.greetRun = g.RunID

	_, err = engine.Enqueue(ctx, e, Ship, dlqSecret, engine.JobOptions{Key: "ship-1"})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
		return err == nil && len(ds) == 1
	}, 30*time.Second, 10*time.Millisecond, "job ship-1 fails for good and is dead-lettered")

	o, err := engine.Start(ctx, e, Order, dlqSecret, engine.StartOptions{ID: "order-1"})
	require.NoError(t, err)
	_, err = o.Result(ctx)
	var wfErr *engine.WorkflowError
	require.ErrorAs(t, err, &wfErr)
	f.orderRun = o.RunID

	nap, err := engine.Start(ctx, e, Nap, 0, engine.StartOptions{ID: "nap-1"})
	require.NoError(t, err)
	f.napRun = nap.RunID
	f.nap2, err = engine.Start(ctx, e, Nap, 0, engine.StartOptions{ID: "nap-2"})
	require.NoError(t, err)
	f.await, err = engine.Start(ctx, e, AwaitApproval, 0, engine.StartOptions{ID: "await-1"})
	require.NoError(t, err)
	f.awaitRun = f.await.RunID
	for _, r := range []*engine.Run[int]{nap, f.nap2} {
		require.Eventually(t, func() bool {
			info, err := r.Describe(ctx)
			return err == nil && len(info.PendingTimers) == 1
		}, 30*time.Second, 10*time.Millisecond, "%s's workflow task starts its timer", r.WorkflowID)
	}
	require.Eventually(t, func() bool {
		info, err := f.await.Describe(ctx)
		return err == nil && info.LastEventID > 1
	}, 30*time.Second, 10*time.Millisecond, "await-1's workflow task runs and waits for its signal")

	ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	f.order, f.ship = ds[0].ID, ds[1].ID
	require.Equal(t, "order-1", ds[0].WorkflowID)
	return f
}

func TestSQLite(t *testing.T) {
	t.Parallel()
	f := liteSetup(t)
	db := f.path

	t.Run("Forms", func(t *testing.T) {
		// The same file by its three names lists the same runs.
		want := durable(t, db, "--json", "workflow", "list")
		requireCode(t, exitOK, want)
		for _, form := range []string{"sqlite:" + db, "file:" + db} {
			r := durable(t, form, "--json", "workflow", "list")
			requireCode(t, exitOK, r)
			require.Equal(t, want.stdout, r.stdout, form)
			require.Empty(t, r.stderr, "a database that is set is not announced")
		}
	})

	t.Run("List", func(t *testing.T) {
		r := durable(t, db, "workflow", "list")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 6, r.stdout)
		require.Regexp(t, `^WORKFLOW ID\s+RUN ID\s+TYPE\s+STATUS\s+CREATED\s+CLOSED$`, lines[0])
		require.Regexp(t, `^await-1\s+`+f.awaitRun+`\s+AwaitApproval\s+running\s+\S+\s+-$`, lines[1], "newest first")
		require.Regexp(t, `^nap-2\s+`+f.nap2.RunID+`\s+Nap\s+running\s+\S+\s+-$`, lines[2])
		require.Regexp(t, `^nap-1\s+`+f.napRun+`\s+Nap\s+running\s+\S+\s+-$`, lines[3])
		require.Regexp(t, `^order-1\s+`+f.orderRun+`\s+Order\s+failed\s+\S+\s+\S+$`, lines[4])
		require.Regexp(t, `^greet-1\s+`+f.greetRun+`\s+Greet\s+completed\s+\S+\s+\S+$`, lines[5])
		require.NotContains(t, r.stdout, secret)

		r = durable(t, db, "--json", "workflow", "list", "--status", "failed")
		requireCode(t, exitOK, r)
		var runs []store.RunSummary
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
		require.Len(t, runs, 1)
		require.Equal(t, f.orderRun, runs[0].RunID)
		require.Equal(t, "Order", runs[0].WorkflowType)
		require.NotNil(t, runs[0].ClosedAt)
	})

	t.Run("Describe", func(t *testing.T) {
		r := durable(t, db, "--json", "workflow", "describe", "nap-1")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, f.napRun, d.RunID)
		require.Equal(t, "running", d.Status)
		require.Len(t, d.PendingTimers, 1)
		require.WithinDuration(t, d.CreatedAt.Add(time.Hour), d.PendingTimers[0].FireAt, time.Minute)
		require.Empty(t, d.PendingActivities)

		r = durable(t, db, "workflow", "describe", "greet-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Status\s+completed$`, r.stdout)
		require.Regexp(t, `(?m)^Run ID\s+`+f.greetRun+`$`, r.stdout)
		require.NotContains(t, r.stdout, secret, "payloads only with --payloads")
		r = durable(t, db, "workflow", "describe", "greet-1", "--payloads")
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Result\s+"hello `+secret+`"$`, r.stdout)

		r = durable(t, db, "workflow", "describe", "nope")
		requireCode(t, exitNotFound, r)
		require.Contains(t, r.stderr, `no workflow with ID "nope"`)
	})

	t.Run("History", func(t *testing.T) {
		r := durable(t, db, "workflow", "history", "greet-1")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 5, r.stdout)
		require.Regexp(t, `^1\s+\S+\s+workflow_started\s+Greet on queue default$`, lines[1])
		require.Regexp(t, `^2\s+\S+\s+activity_scheduled\s+seq 1: Hello on queue default$`, lines[2])
		require.NotContains(t, r.stdout, secret)

		r = durable(t, db, "--json", "workflow", "history", "order-1", "--payloads")
		requireCode(t, exitOK, r)
		var events []history.Event
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &events), r.stdout)
		require.Equal(t, []string{
			"workflow_started", "activity_scheduled", "activity_completed",
			"activity_scheduled", "activity_failed", "workflow_failed",
		}, eventTypes(events))
		require.Contains(t, r.stdout, dlqSecret, "--payloads gives the whole history")
	})

	t.Run("Stats", func(t *testing.T) {
		r := durable(t, db, "--json", "stats")
		requireCode(t, exitOK, r)
		var s statsOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &s), r.stdout)
		require.WithinDuration(t, time.Now(), s.Now, time.Minute)
		require.Len(t, s.Queues, 1, r.stdout)
		require.Equal(t, "default", s.Queues[0].Queue)
		require.Equal(t, 2, s.Queues[0].TimersPending, "nap-1's and nap-2's timers")
		require.Equal(t, []deadLetterStatsOutput{
			{Kind: store.DeadJob, Pending: 1}, {Kind: store.DeadWorkflow, Pending: 1},
		}, withoutAges(s.DeadLetters))
		outcomes := map[string][2]int{}
		for _, a := range s.Activities {
			outcomes[a.Activity] = [2]int{a.Completed, a.Failed}
		}
		require.Equal(t, map[string][2]int{"Hello": {1, 0}, "Reserve": {1, 0}, "Charge": {0, 1}}, outcomes)

		r = durable(t, db, "stats")
		requireCode(t, exitOK, r)
		require.Regexp(t, `\nDead letters not yet redriven\n  KIND\s+PENDING\s+OLDEST\n  job\s+1\s+\S+\n  workflow\s+1\s+\S+\n`, r.stdout)
	})

	t.Run("Signal", func(t *testing.T) {
		r := durable(t, db, "workflow", "signal", "await-1", "approve", "--payload", `"yes"`)
		requireCode(t, exitOK, r)
		require.Equal(t, "workflow await-1: signal approve sent\n", r.stdout)
		res, err := await(t, f.await)
		require.NoError(t, err, "the engine finds the signal when it polls")
		require.Equal(t, "yes", res)

		r = durable(t, db, "workflow", "signal", "greet-1", "approve")
		requireCode(t, exitFailure, r)
		require.Contains(t, r.stderr, `workflow "greet-1" has no open run: its last run is completed`)
		r = durable(t, db, "workflow", "signal", "nope", "approve")
		requireCode(t, exitNotFound, r)
	})

	t.Run("Terminate", func(t *testing.T) {
		r := durable(t, db, "--json", "workflow", "terminate", "nap-1", "--reason", "cleaning up")
		requireCode(t, exitOK, r)
		require.JSONEq(t, `{"workflow_id": "nap-1", "done": "terminate"}`, r.stdout)

		r = durable(t, db, "--json", "workflow", "describe", "nap-1")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, "terminated", d.Status)
		require.Empty(t, d.PendingTimers, "a terminated run's timers are dropped")

		r = durable(t, db, "workflow", "history", "nap-1")
		requireCode(t, exitOK, r)
		require.Regexp(t, `\n\d+\s+\S+\s+workflow_terminated\s+cleaning up\n$`, r.stdout)
	})

	t.Run("Cancel", func(t *testing.T) {
		r := durable(t, db, "workflow", "cancel", "nap-2", "--reason", "no longer needed")
		requireCode(t, exitOK, r)
		require.Equal(t, "workflow nap-2: cancel requested: the run ends as canceled once its workflow code returns\n", r.stdout)
		_, err := await(t, f.nap2)
		var wfErr *engine.WorkflowError
		require.ErrorAs(t, err, &wfErr, "the engine finds the request when it polls, and the run ends")
		require.ErrorContains(t, err, "canceled: no longer needed")

		r = durable(t, db, "--json", "workflow", "describe", "nap-2")
		requireCode(t, exitOK, r)
		var d describeOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &d), r.stdout)
		require.Equal(t, "canceled", d.Status)
	})

	t.Run("DLQ", func(t *testing.T) {
		r := durable(t, db, "dlq", "list")
		requireCode(t, exitOK, r)
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 3, r.stdout)
		require.Regexp(t, `^`+id(f.order)+`\s+workflow\s+Order\s+1\s+\S+\s+.*card declined.*\s+-$`, lines[1])
		require.Regexp(t, `^`+id(f.ship)+`\s+job\s+Ship\s+1\s+permanent\s+invalid address\s+\S+\s+\S+\s+-$`, lines[2])
		require.NotContains(t, r.stdout, dlqSecret)

		r = durable(t, db, "dlq", "show", id(f.order))
		requireCode(t, exitOK, r)
		require.Regexp(t, `(?m)^Failed run ID\s+`+f.orderRun+`$`, r.stdout)
		require.Contains(t, r.stdout, "Redrive it once the fix has shipped: durable dlq redrive "+id(f.order))

		r = durable(t, db, "dlq", "show", "999")
		requireCode(t, exitNotFound, r)
		require.Contains(t, r.stderr, "no dead letter with ID 999")
	})

	t.Run("Redrive", func(t *testing.T) {
		r := durable(t, db, "dlq", "redrive", "--all")
		requireCode(t, exitOK, r)
		re := regexp.MustCompile(`^dead letter ` + id(f.ship) + ` \(job Ship\): redriven: queued again with a fresh attempt budget\n` +
			`dead letter ` + id(f.order) + ` \(workflow Order, workflow ID order-1\): redriven: continues in run (\S+)\n` +
			`redrove 2 dead letter\(s\)\n$`)
		require.Regexp(t, re, r.stdout, "oldest first")
		newRun := re.FindStringSubmatch(r.stdout)[1]
		require.NotEqual(t, f.orderRun, newRun)

		r = durable(t, db, "--json", "dlq", "redrive", id(f.order))
		requireCode(t, exitOK, r)
		var out []redriveOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.Len(t, out, 1)
		require.False(t, out[0].Redriven, "a second redrive does nothing")
		require.Equal(t, newRun, out[0].RunID)

		r = durable(t, db, "--json", "workflow", "list", "--id", "order-1")
		requireCode(t, exitOK, r)
		var runs []store.RunSummary
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
		require.Len(t, runs, 2)
		require.Equal(t, newRun, runs[0].RunID, "the redriven run is order-1's newest")
	})

	t.Run("Migrate", func(t *testing.T) {
		r := durable(t, db, "migrate")
		requireCode(t, exitOK, r)
		require.Equal(t, "schema is up to date at version "+itoa(sqlite.SchemaVersion())+": nothing to apply\n", r.stdout)

		r = durable(t, db, "--json", "migrate", "status")
		requireCode(t, exitOK, r)
		var out statusOutput
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.True(t, out.UpToDate)
		require.Equal(t, sqlite.SchemaVersion(), out.Current)
		require.Equal(t, sqlite.SchemaVersion(), out.Needed)
		require.Len(t, out.Migrations, len(sqlite.Migrations()))
		for i, m := range out.Migrations {
			require.Equal(t, sqlite.Migrations()[i].Name, m.Name)
			require.NotNil(t, m.AppliedAt, "migration %d", m.Version)
		}
	})

	t.Run("PostgresOnly", func(t *testing.T) {
		for _, args := range [][]string{
			{"migrate", "print"},
			{"--json", "migrate", "print", "--after", "1"},
			{"migrate", "roles"},
		} {
			r := durable(t, db, args...)
			requireCode(t, exitUsage, r)
			require.Empty(t, r.stdout)
			require.Contains(t, r.stderr, "` is PostgreSQL's: ")
			require.Contains(t, r.stderr, "run `durable migrate`")
			require.Contains(t, r.stderr, "the database is the SQLite file "+db)
		}
		r := durable(t, db, "migrate", "print")
		require.Contains(t, r.stderr, "durable: `durable migrate print` is PostgreSQL's: SQLite needs no script; run `durable migrate`")
	})
}

// TestSQLiteActivityComplete is TestActivityComplete on a SQLite file: the
// engine finds the outcomes the CLI records when it polls.
func TestSQLiteActivityComplete(t *testing.T) {
	t.Parallel()
	db := filepath.Join(t.TempDir(), "durable.db")
	e, err := engine.Open(t.Context(), db, engine.Options{Logger: slog.New(slog.DiscardHandler), PollInterval: litePoll})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, e.Close()) })
	activityComplete(t, e, db)
}

// withoutAges returns ds without their times, which depend on when the
// test ran.
func withoutAges(ds []deadLetterStatsOutput) []deadLetterStatsOutput {
	out := make([]deadLetterStatsOutput, len(ds))
	for i, d := range ds {
		out[i] = deadLetterStatsOutput{Kind: d.Kind, Pending: d.Pending}
	}
	return out
}

// itoa is strconv.Itoa, short.
func itoa(n int) string { return id(int64(n)) }

func TestSQLiteMigrateNewFile(t *testing.T) {
	t.Parallel()
	// migrate creates the file and its directory.
	db := filepath.Join(t.TempDir(), "new", "durable.db")
	r := durable(t, db, "--json", "migrate")
	requireCode(t, exitOK, r)
	var out migrateOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
	var applied []int
	for i, m := range out.Applied {
		applied = append(applied, m.Version)
		require.Equal(t, sqlite.Migrations()[i].Name, m.Name)
	}
	require.Len(t, applied, len(sqlite.Migrations()))
	require.Equal(t, sqlite.SchemaVersion(), out.Version)

	r = durable(t, db, "workflow", "list")
	requireCode(t, exitOK, r)
	require.Equal(t, "no runs found\n", r.stdout)

	// An engine opens the file the command made, without migrating.
	e, err := engine.Open(t.Context(), db, engine.Options{SkipMigrate: true, Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, e.Close())
}

func TestSQLiteDatabaseErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	garbage := filepath.Join(dir, "garbage.db")
	require.NoError(t, os.WriteFile(garbage, []byte("not a database, just text that is long enough to be read as a header\n"), 0o644))
	empty := filepath.Join(dir, "empty.db")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))

	for _, args := range [][]string{
		{"workflow", "list"},
		{"workflow", "describe", "x"},
		{"--json", "workflow", "history", "x"},
		{"workflow", "signal", "x", "y"},
		{"dlq", "list"},
		{"stats"},
		{"migrate", "status"},
	} {
		t.Run("Missing/"+strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := durable(t, missing, args...)
			requireCode(t, exitUnreachable, r)
			require.Contains(t, r.stderr, "no SQLite database at "+missing+": check --db (or DATABASE_URL), or create it with `durable migrate`")
			require.Empty(t, r.stdout)
			require.NoFileExists(t, missing, "only migrate creates a file")
		})
		t.Run("Garbage/"+strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := durable(t, garbage, args...)
			requireCode(t, exitUnreachable, r)
			require.Contains(t, r.stderr, "SQLite database "+garbage)
			require.Contains(t, r.stderr, "file is not a database")
			require.Empty(t, r.stdout)
		})
	}
	t.Run("Directory", func(t *testing.T) {
		t.Parallel()
		r := durable(t, dir, "workflow", "list")
		requireCode(t, exitUnreachable, r)
		require.Contains(t, r.stderr, "cannot open the SQLite database "+dir)
	})
	t.Run("Behind", func(t *testing.T) {
		t.Parallel()
		// An empty file is a database with no schema.
		for _, args := range [][]string{{"workflow", "list"}, {"dlq", "redrive", "--all"}, {"migrate", "status"}} {
			r := durable(t, empty, args...)
			requireCode(t, exitSchema, r)
			require.Contains(t, r.stderr, "database schema is at version 0, this binary needs "+itoa(sqlite.SchemaVersion())+": run `durable migrate`")
		}
	})
	t.Run("UnknownScheme", func(t *testing.T) {
		t.Parallel()
		r := durable(t, "mysql://app:pw@db/app", "workflow", "list")
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, `--db: unknown scheme "mysql": pass postgres://user@host:port/database for PostgreSQL, or a file path (or sqlite:PATH) for SQLite`)
		require.NotContains(t, r.stderr, "pw", "the DSN may hold a password")
	})
	t.Run("FileOptions", func(t *testing.T) {
		t.Parallel()
		r := durable(t, "file:"+missing+"?mode=ro", "workflow", "list")
		requireCode(t, exitUsage, r)
		require.Contains(t, r.stderr, `pass the file's path without "?mode=ro"`)
	})
}

func TestParseDSN(t *testing.T) {
	t.Parallel()
	tests := []struct {
		dsn        string
		kind, want string
	}{
		{"postgres://u@h:5432/db?sslmode=disable", storePostgres, "postgres://u@h:5432/db?sslmode=disable"},
		{"postgresql://u@h/db", storePostgres, "postgresql://u@h/db"},
		{"host=h user=u dbname=db", storePostgres, "host=h user=u dbname=db"},
		{"user=u dbname=db", storePostgres, "user=u dbname=db"},
		{"dbname=db", storePostgres, "dbname=db"},
		{" /var/lib/app/durable.db ", storeSQLite, "/var/lib/app/durable.db"},
		{"durable.db", storeSQLite, "durable.db"},
		{"sqlite:durable.db", storeSQLite, "durable.db"},
		{"sqlite:///tmp/durable.db", storeSQLite, "/tmp/durable.db"},
		{"file:/tmp/durable.db", storeSQLite, "/tmp/durable.db"},
	}
	for _, tt := range tests {
		db, err := parseDSN(tt.dsn)
		require.NoError(t, err, tt.dsn)
		require.Equal(t, database{kind: tt.kind, target: tt.want}, db, tt.dsn)
	}
	for dsn, want := range map[string]string{
		"":                       "--db is empty",
		"mysql://u:secret@h/db":  `unknown scheme "mysql"`,
		"sqlite:":                "no file path after the scheme",
		"file:x.db?_pragma=foo":  `without "?_pragma=foo"`,
		"redis://localhost:6379": `unknown scheme "redis"`,
	} {
		_, err := parseDSN(dsn)
		var ee *exitError
		require.ErrorAs(t, err, &ee, dsn)
		require.Equal(t, exitUsage, ee.code, dsn)
		require.ErrorContains(t, err, want, dsn)
		require.NotContains(t, err.Error(), "secret", "the DSN may hold a password")
	}
}

// TestDevDatabase runs the command with neither --db nor DATABASE_URL: it
// uses the development SQLite file the examples use, and says so on
// stderr. It sets the environment, so it runs alone.
func TestDevDatabase(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("HOME", cache)
	t.Setenv("XDG_CACHE_HOME", cache)
	t.Setenv("DATABASE_URL", "")
	require.NoError(t, os.Unsetenv("DATABASE_URL")) // t.Setenv restores it
	dev := engine.DevDatabase()
	require.Equal(t, filepath.Join(cache, "durable", "dev.db"), dev)
	notice := "durable: using the development database " + dev + " (set --db or DATABASE_URL for another)\n"

	r := durable(t, "", "workflow", "list")
	requireCode(t, exitUnreachable, r)
	require.True(t, strings.HasPrefix(r.stderr, notice), r.stderr)
	require.Contains(t, r.stderr, "no SQLite database at "+dev)

	r = durable(t, "", "--json", "migrate")
	requireCode(t, exitOK, r)
	require.Equal(t, notice, r.stderr)
	var out migrateOutput
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), "stdout is JSON only: %s", r.stdout)
	require.Equal(t, sqlite.SchemaVersion(), out.Version)

	// A run of an engine on the default database, as the examples make.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	e, err := engine.Open(ctx, engine.DefaultDSN(), engine.Options{Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Greet, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Hello, activity.Options{}))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- e.Run(runCtx) }()
	g, err := engine.Start(ctx, e, Greet, "ada", engine.StartOptions{ID: "dev-1"})
	require.NoError(t, err)
	_, err = g.Result(ctx)
	stop()
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.NoError(t, e.Close())

	r = durable(t, "", "--json", "workflow", "list")
	requireCode(t, exitOK, r)
	require.Equal(t, notice, r.stderr)
	var runs []store.RunSummary
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &runs), r.stdout)
	require.Len(t, runs, 1)
	require.Equal(t, g.RunID, runs[0].RunID)

	r = durable(t, "", "migrate", "print")
	requireCode(t, exitUsage, r)
	require.True(t, strings.HasPrefix(r.stderr, notice), r.stderr)
	require.Contains(t, r.stderr, "the database is the SQLite file "+dev)

	// DATABASE_URL, or --db, is used without a word.
	t.Setenv("DATABASE_URL", dev)
	r = durable(t, "", "workflow", "list")
	requireCode(t, exitOK, r)
	require.Empty(t, r.stderr)
	require.Contains(t, r.stdout, "dev-1")
	require.NoError(t, os.Unsetenv("DATABASE_URL"))
	r = durable(t, "sqlite:"+dev, "workflow", "list")
	requireCode(t, exitOK, r)
	require.Empty(t, r.stderr)

	// Help names the default.
	r = durable(t, "", "--help")
	requireCode(t, exitOK, r)
	require.Contains(t, r.stdout, "else the development file "+dev)
	require.Contains(t, r.stdout, "PATH, sqlite:PATH or file:PATH       a SQLite file")
	require.Empty(t, r.stderr, "help opens no database")
}

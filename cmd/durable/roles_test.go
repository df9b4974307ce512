package main

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/workflow"
)

// Checked runs an activity and a timer, then waits for an "approve"
// signal: between them they write every table the engine has.
func Checked(ctx workflow.Context, name string) (string, error) {
	greeting, err := workflow.ExecuteActivity(ctx, Hello, name).Get(ctx)
	if err != nil {
		return "", err
	}
	if err := workflow.Sleep(ctx, time.Millisecond); err != nil {
		return "", err
	}
	v, err := workflow.GetSignalChannel[string](ctx, "approve").Receive(ctx)
	return greeting + ", " + v, err
}

func TestMigrateRolesPrint(t *testing.T) {
	t.Parallel()
	t.Run("Defaults", func(t *testing.T) {
		t.Parallel()
		r := durable(t, unreachable, "migrate", "roles")
		requireCode(t, exitOK, r)
		require.Empty(t, r.stderr)
		for _, want := range []string{
			"BEGIN;\n", "COMMIT;\n",
			"ARRAY['durable_owner', 'durable_worker', 'durable_readonly']",
			`GRANT USAGE, CREATE ON SCHEMA public TO "durable_owner";`,
			`ALTER DEFAULT PRIVILEGES FOR ROLE "durable_owner" IN SCHEMA public` + "\n" + `    GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "durable_worker";`,
			`GRANT SELECT ON TABLES TO "durable_readonly";`,
		} {
			require.Contains(t, r.stdout, want)
		}
		require.NotContains(t, r.stdout, "{{", "every placeholder is filled in")
	})

	t.Run("Names", func(t *testing.T) {
		t.Parallel()
		r := durable(t, unreachable, "--json", "migrate", "roles", "--owner", "app_own", "--worker", "app_work", "--readonly", "app_ro")
		requireCode(t, exitOK, r)
		var out struct {
			roleNames
			SQL string `json:"sql"`
		}
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &out), r.stdout)
		require.Equal(t, roleNames{Owner: "app_own", Worker: "app_work", Readonly: "app_ro"}, out.roleNames)
		require.Contains(t, out.SQL, `ALTER DEFAULT PRIVILEGES FOR ROLE "app_own" IN SCHEMA public`)
		require.NotContains(t, out.SQL, "durable_owner")
		require.NotContains(t, out.SQL, "durable_worker")
	})

	t.Run("BadNames", func(t *testing.T) {
		t.Parallel()
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"Quote", []string{"--owner", "x'; DROP TABLE durable_runs; --"}, `--owner "x'; DROP TABLE durable_runs; --": a role name here is 1 to 63 lower-case letters`},
			{"DoubleQuote", []string{"--worker", `w"x`}, "--worker"},
			{"Dollar", []string{"--worker", "w$$x"}, "--worker"},
			{"Upper", []string{"--readonly", "Reader"}, "--readonly"},
			{"Digit", []string{"--owner", "1owner"}, "not starting with a digit"},
			{"Empty", []string{"--owner", ""}, "--owner"},
			{"TooLong", []string{"--owner", strings.Repeat("o", 64)}, "--owner"},
			{"Reserved", []string{"--worker", "pg_worker"}, `--worker "pg_worker": PostgreSQL reserves this role name`},
			{"Public", []string{"--readonly", "public"}, "PostgreSQL reserves this role name"},
			{"Same", []string{"--worker", "durable_owner"}, "must be three different roles"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				t.Parallel()
				r := durable(t, unreachable, append([]string{"migrate", "roles"}, tt.args...)...)
				requireCode(t, exitUsage, r)
				require.Contains(t, r.stderr, tt.want)
				require.Empty(t, r.stdout, "no script for a name that cannot be used")
			})
		}
	})
}

func TestRoles(t *testing.T) {
	t.Parallel()

	t.Run("EmptyDatabase", func(t *testing.T) {
		t.Parallel()
		db := pgtest.EmptyDatabase(t)
		n := testRoles(t, db)
		applyRoles(t, db, n)
		applyRoles(t, db, n) // a second time changes nothing
		owner, worker, reader := asRole(t, db, n.Owner), asRole(t, db, n.Worker), asRole(t, db, n.Readonly)
		ctx := roleCtx(t)

		// The owner migrates.
		r := durable(t, owner, "migrate")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "applied 0001_init")
		requireCode(t, exitOK, durable(t, owner, "migrate", "status"))

		// The worker runs workflows, and the commands that change runs.
		e := startWorker(t, worker)
		run, err := engine.Start(ctx, e, Checked, "ada", engine.StartOptions{ID: "checked-1"})
		require.NoError(t, err)
		_, err = engine.Start(ctx, e, Nap, 0, engine.StartOptions{ID: "nap-1"})
		require.NoError(t, err)
		_, err = engine.Enqueue(ctx, e, Ship, "parcel", engine.JobOptions{Key: "ship-1"})
		require.NoError(t, err)
		var deadID string
		require.Eventually(t, func() bool {
			ds, err := e.DeadLetters(ctx, engine.DeadLetterFilter{})
			if err != nil || len(ds) == 0 {
				return false
			}
			deadID = strconv.FormatInt(ds[0].ID, 10)
			return true
		}, 30*time.Second, 20*time.Millisecond, "the Ship job fails for good and is dead-lettered")

		// The read-only role cannot change anything, and says which role can.
		for _, args := range [][]string{
			{"workflow", "signal", "checked-1", "approve", "--payload", `"no"`},
			{"workflow", "cancel", "nap-1"},
			{"workflow", "terminate", "nap-1"},
			{"dlq", "redrive", deadID},
		} {
			r := durable(t, reader, args...)
			requireCode(t, exitFailure, r)
			require.Contains(t, r.stderr, "permission denied for table durable_", "durable %s", strings.Join(args, " "))
			require.Contains(t, r.stderr, "the worker role for workflow signal, cancel and terminate and dlq redrive")
		}
		for _, args := range [][]string{
			{"workflow", "signal", "checked-1", "approve", "--payload", `"yes"`},
			{"workflow", "terminate", "nap-1"},
			{"dlq", "redrive", deadID},
		} {
			requireCode(t, exitOK, durable(t, worker, args...))
		}
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello ada, yes", got, "the worker's signal arrived, the read-only role's did not")

		// The read-only role inspects.
		for _, args := range [][]string{
			{"workflow", "list"},
			{"--json", "workflow", "list"},
			{"workflow", "describe", "checked-1"},
			{"workflow", "history", "checked-1", "--payloads"},
			{"stats"},
			{"dlq", "list", "--all"},
			{"dlq", "show", deadID},
			{"migrate", "status"},
		} {
			r := durable(t, reader, args...)
			requireCode(t, exitOK, r)
			require.NotContains(t, r.stderr, "permission denied")
		}
		r = durable(t, reader, "workflow", "history", "checked-1")
		require.Contains(t, r.stdout, "signal_received")
		require.Contains(t, r.stdout, "timer_fired")

		requireDDLRefused(t, worker)
		requireNoWrites(t, reader)
		requireListenNotify(t, worker)

		// A table the owner creates later, as a newer binary's migration
		// would, gets the grants by default.
		runSQL(t, owner, "CREATE TABLE durable_later (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, note text NOT NULL)")
		runSQL(t, owner, "CREATE SEQUENCE durable_later_seq")
		runSQL(t, worker, "INSERT INTO durable_later (note) VALUES ('by the worker')")
		runSQL(t, worker, "SELECT nextval('durable_later_seq')")
		runSQL(t, reader, "SELECT count(*) FROM durable_later")
		requireRefused(t, reader, "INSERT INTO durable_later (note) VALUES ('by the reader')")
		requireRefused(t, worker, "DROP TABLE durable_later")

		r = durable(t, owner, "migrate")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "nothing to apply")
	})

	t.Run("MigratedDatabase", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Database(t) // migrated by the administrator
		n := testRoles(t, db)
		applyRoles(t, db, n)
		owner, worker, reader := asRole(t, db, n.Owner), asRole(t, db, n.Worker), asRole(t, db, n.Readonly)
		ctx := roleCtx(t)

		conn := connect(t, db)
		var notOwned []string
		rows, err := conn.Query(ctx, `
			SELECT relname FROM pg_class
			WHERE relnamespace = 'public'::regnamespace AND relkind IN ('r', 'p', 'S', 'i')
			  AND relname LIKE 'durable\_%' AND relowner <> $1::regrole
			ORDER BY relname`, n.Owner)
		require.NoError(t, err)
		notOwned, err = pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		require.Empty(t, notOwned, "every durable table, index and sequence passed to the owner")

		r := durable(t, owner, "migrate")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "nothing to apply")

		e := startWorker(t, worker)
		run, err := engine.Start(ctx, e, Greet, "grace", engine.StartOptions{ID: "greet-1"})
		require.NoError(t, err)
		got, err := run.Result(ctx)
		require.NoError(t, err)
		require.Equal(t, "hello grace", got)

		r = durable(t, reader, "workflow", "list")
		requireCode(t, exitOK, r)
		require.Contains(t, r.stdout, "greet-1")
		requireDDLRefused(t, worker)
		requireNoWrites(t, reader)
	})

	t.Run("RefusesSuperuser", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Database(t)
		conn := connect(t, db)
		var admin string
		var super bool
		require.NoError(t, conn.QueryRow(roleCtx(t), "SELECT rolname, rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&admin, &super))
		require.True(t, super, "the test server's administrator %s is a superuser", admin)

		n := testRoles(t, db)
		n.Worker = admin // not dropped: testRoles drops only the names it made
		r := durable(t, unreachable, "migrate", "roles", "--owner", n.Owner, "--worker", n.Worker, "--readonly", n.Readonly)
		requireCode(t, exitOK, r)
		err := execOnce(t, db, r.stdout)
		require.ErrorContains(t, err, "role "+admin+" exists and is a superuser or bypasses row security: pick another name")
		var made int
		require.NoError(t, conn.QueryRow(roleCtx(t), "SELECT count(*) FROM pg_roles WHERE rolname IN ($1, $2)", n.Owner, n.Readonly).Scan(&made))
		require.Zero(t, made, "the script is one transaction: nothing was created")
	})
}

// testRoles returns role names of the test's own (roles are shared by the
// whole server) and drops those roles, once the test is done, with what
// they own and were granted in database db.
func testRoles(t *testing.T, db string) roleNames {
	t.Helper()
	p := "dt_" + strings.ToLower(rand.Text()[:12]) + "_"
	n := roleNames{Owner: p + "owner", Worker: p + "worker", Readonly: p + "readonly"}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Errorf("drop the test's roles %v: %v", n, err)
			return
		}
		defer conn.Close(ctx)
		// One role at a time, the owner first: DROP OWNED BY of several
		// roles at once trips over the default privileges they share.
		for _, name := range []string{n.Owner, n.Worker, n.Readonly} {
			var exists bool
			if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_roles WHERE rolname = $1)", name).Scan(&exists); err != nil || !exists {
				continue
			}
			id := pgx.Identifier{name}.Sanitize()
			for _, sql := range []string{"REASSIGN OWNED BY " + id + " TO CURRENT_USER", "DROP OWNED BY " + id, "DROP ROLE " + id} {
				if _, err := conn.Exec(ctx, sql); err != nil {
					t.Errorf("drop test role %s (%s): %v: drop it by hand", name, sql, err)
					break
				}
			}
		}
	})
	return n
}

// applyRoles runs the script 'durable migrate roles' prints for n on
// database db, as the administrator.
func applyRoles(t *testing.T, db string, n roleNames) {
	t.Helper()
	r := durable(t, unreachable, "migrate", "roles", "--owner", n.Owner, "--worker", n.Worker, "--readonly", n.Readonly)
	requireCode(t, exitOK, r)
	runSQL(t, db, r.stdout)
}

// asRole returns db's URL with user role.
func asRole(t *testing.T, db, role string) string {
	t.Helper()
	u, err := url.Parse(db)
	require.NoError(t, err)
	u.User = url.User(role)
	return u.String()
}

func roleCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// connect returns a connection to db, closed in t.Cleanup.
func connect(t *testing.T, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(roleCtx(t), db)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// execOnce runs sql on a connection of its own to db.
func execOnce(t *testing.T, db, sql string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql)
	return err
}

// runSQL runs sql on db.
func runSQL(t *testing.T, db, sql string) {
	t.Helper()
	require.NoError(t, execOnce(t, db, sql), "%s as %s", sql, db)
}

// requireRefused fails unless running sql on db is refused for want of a
// privilege.
func requireRefused(t *testing.T, db, sql string) {
	t.Helper()
	err := execOnce(t, db, sql)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "%s as %s", sql, db)
	require.Equal(t, "42501", pgErr.Code, "%s as %s: want insufficient_privilege, got %v", sql, db, err)
}

// requireDDLRefused checks that db's user cannot change the schema, nor the
// record of the migrations applied to it, which it can read (engine.New
// with SkipMigrate checks the schema's version there).
func requireDDLRefused(t *testing.T, db string) {
	t.Helper()
	runSQL(t, db, "SELECT max(version) FROM durable_schema_migrations")
	for _, sql := range []string{
		"DELETE FROM durable_schema_migrations",
		"INSERT INTO durable_schema_migrations (version, name) VALUES (999, 'evil')",
		"UPDATE durable_schema_migrations SET version = 0",
		"CREATE TABLE durable_evil (id bigint)",
		"CREATE TABLE public.evil (id bigint)",
		"DROP TABLE durable_runs",
		"ALTER TABLE durable_runs ADD COLUMN evil text",
		"CREATE INDEX durable_evil ON durable_events (created_at)",
		"TRUNCATE durable_events",
		"DROP SEQUENCE durable_task_token",
		"SELECT setval('durable_task_token', 1)",
	} {
		requireRefused(t, db, sql)
	}
}

// requireNoWrites checks that db's user can read and not write.
func requireNoWrites(t *testing.T, db string) {
	t.Helper()
	runSQL(t, db, "SELECT count(*) FROM durable_runs")
	for _, sql := range []string{
		"INSERT INTO durable_effects (idempotency_key, created_at) VALUES ('by-the-reader', now())",
		"UPDATE durable_runs SET status = 'terminated'",
		"DELETE FROM durable_events",
		"SELECT nextval('durable_task_token')",
		"CREATE TABLE durable_evil (id bigint)",
	} {
		requireRefused(t, db, sql)
	}
}

// requireListenNotify checks that db's user can LISTEN and NOTIFY, which
// the engine uses to wake workers.
func requireListenNotify(t *testing.T, db string) {
	t.Helper()
	ctx := roleCtx(t)
	listener := connect(t, db)
	_, err := listener.Exec(ctx, "LISTEN durable_role_check")
	require.NoError(t, err)
	runSQL(t, db, "SELECT pg_notify('durable_role_check', 'hello')")
	n, err := listener.WaitForNotification(ctx)
	require.NoError(t, err)
	require.Equal(t, "hello", n.Payload)
}

// startWorker returns an engine on db that does not migrate and runs
// Checked, Greet and Nap, Hello and the job Ship until the test ends.
func startWorker(t *testing.T, db string) *engine.Engine {
	t.Helper()
	pool, err := pgxpool.New(roleCtx(t), db)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e, err := engine.New(pool, engine.Options{
		SkipMigrate:  true,
		Logger:       slog.New(slog.DiscardHandler),
		PollInterval: time.Second,
	})
	require.NoError(t, err)
	require.NoError(t, engine.RegisterWorkflow(e, Checked, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Greet, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterWorkflow(e, Nap, engine.WorkflowOptions{}))
	require.NoError(t, engine.RegisterActivity(e, Hello, activity.Options{}))
	require.NoError(t, engine.RegisterActivity(e, Ship, activity.Options{}))

	runEngine(t, e)
	return e
}

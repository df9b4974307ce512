package main

import (
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
	"github.com/durable-go/durable/internal/store/sqlite"
)

func (a *app) migrateCommand() *cobra.Command {
	var dryRun, force bool
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema migrations the database lacks",
		Long: `migrate applies the schema migrations this binary embeds and the database
lacks, each in its own transaction, and prints what it applied. It is safe
to run from several places at once: on PostgreSQL it holds an advisory lock
while it works; on SQLite each migration's transaction holds the file's
write lock. engine.New and engine.Open do the same unless
Options.SkipMigrate is set.

Each migration says the oldest schema version an engine may be built for
and still run once it is applied: a migration that only adds lets the
previous release's engines run on beside it (a rolling deploy), one that
removes does not. Running engines record themselves in the database; migrate
refuses (exit 5) to apply a migration that engines seen in the last minute
cannot run with, and names them. Stop them first, or pass --force and accept
that they fail. --dry-run prints the migrations it would apply, the engines
running and the schema version each needs, and changes nothing; it exits 5
when migrate would refuse.

On SQLite, migrate creates the file, and its directory, if they are not
there: the other commands do not.

Migrations only go forward. To apply PostgreSQL's with your own tools
instead, take the SQL from 'durable migrate print'. See
docs/compatibility.md.`,
		Example: `  durable migrate --dry-run
  durable migrate`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := a.open(ctx, !dryRun)
			if err != nil {
				return err
			}
			// Read first: a file that is no database is exit code 4.
			if _, err := a.schemaVersion(ctx, s); err != nil {
				return err
			}
			plan, err := store.PlanMigration(ctx, s)
			if err != nil {
				return err
			}
			blocked := plan.Err()
			if dryRun {
				if err := a.printPlan(cmd, plan); err != nil {
					return err
				}
				if blocked != nil {
					return &exitError{code: exitSchema, err: fmt.Errorf("migrate would refuse: %w", blocked)}
				}
				return nil
			}
			if blocked != nil {
				if !force {
					return &exitError{code: exitSchema, err: blocked}
				}
				fmt.Fprintf(a.stderr, "durable: warning: --force: migrating although %d running engine(s) cannot run on the result\n", len(plan.Blocked))
			}
			applied, err := s.Migrate(ctx)
			if err != nil {
				return err
			}
			sc, err := a.schemaVersion(ctx, s)
			if err != nil {
				return err
			}
			names := migrationNames(a.db.kind)
			out := migrateOutput{Applied: []migrationRef{}, Version: sc.Have}
			for _, av := range applied {
				out.Applied = append(out.Applied, migrationRef{Version: av, Name: names[av]})
			}
			if a.json {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			w := cmd.OutOrStdout()
			for _, m := range out.Applied {
				fmt.Fprintf(w, "applied %s\n", m.Name)
			}
			if len(out.Applied) == 0 {
				fmt.Fprintf(w, "schema is up to date at version %d: nothing to apply\n", sc.Have)
			} else {
				fmt.Fprintf(w, "schema is at version %d\n", sc.Have)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what migrate would apply and the engines running, and change nothing")
	cmd.Flags().BoolVar(&force, "force", false, "migrate although engines that cannot run on the result are running")
	cmd.AddCommand(a.migrateStatusCommand(), a.migratePrintCommand(), a.migrateRolesCommand())
	return cmd
}

// planOutput is `durable migrate --dry-run --json`.
type planOutput struct {
	Version int             `json:"version"`
	Pending []pendingOutput `json:"pending"`
	// Needs is the oldest schema version an engine may be built for once
	// the pending migrations are applied (0: none is pending).
	Needs   int                  `json:"needs"`
	Engines []store.EngineRecord `json:"engines"`
	Blocked []string             `json:"blocked"`
}

type pendingOutput struct {
	Version      int    `json:"version"`
	Name         string `json:"name"`
	OldestEngine int    `json:"oldest_engine"`
}

// printPlan prints what migrate would do: plan's pending migrations, the
// engines running and those a migration would break.
func (a *app) printPlan(cmd *cobra.Command, plan store.MigrationPlan) error {
	out := planOutput{Version: plan.Schema.Have, Needs: plan.Needs, Pending: []pendingOutput{},
		Engines: append([]store.EngineRecord{}, plan.Live...), Blocked: []string{}}
	for _, m := range plan.Pending {
		out.Pending = append(out.Pending, pendingOutput{Version: m.Version, Name: m.Name, OldestEngine: m.OldestEngine})
	}
	for _, e := range plan.Blocked {
		out.Blocked = append(out.Blocked, e.WorkerID)
	}
	if a.json {
		return writeJSON(cmd.OutOrStdout(), out)
	}
	w := cmd.OutOrStdout()
	if len(out.Pending) == 0 {
		fmt.Fprintf(w, "schema is up to date at version %d: nothing to apply\n", out.Version)
	} else {
		fmt.Fprintf(w, "schema is at version %d; migrate would apply:\n", out.Version)
		for _, m := range out.Pending {
			fmt.Fprintf(w, "  %s\t(engines built for version %d or later run on it)\n", clean(m.Name), m.OldestEngine)
		}
	}
	if len(out.Engines) == 0 {
		fmt.Fprintln(w, "no engine has recorded itself running in the last minute")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENGINE\tSCHEMA\tBUILD\tSTARTED\tSEEN\tCAN RUN AFTER")
	for _, e := range out.Engines {
		ok := "yes"
		if e.SchemaVersion < out.Needs {
			ok = "NO"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", clean(e.WorkerID), e.SchemaVersion, clean(e.Build),
			formatTime(e.StartedAt), formatTime(e.SeenAt), ok)
	}
	return tw.Flush()
}

type migrationRef struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
}

type migrateOutput struct {
	Applied []migrationRef `json:"applied"`
	Version int            `json:"version"`
}

// migrationNames returns the names of the migrations this binary embeds
// for the store kind, by version.
func migrationNames(kind string) map[int]string {
	names := map[int]string{}
	for _, m := range knownMigrations(kind) {
		names[m.Version] = m.Name
	}
	return names
}

// knownMigrations returns the migrations this binary embeds for the store
// kind (storePostgres or storeSQLite), in version order.
func knownMigrations(kind string) []migrationRef {
	var ms []migrationRef
	if kind == storeSQLite {
		for _, m := range sqlite.Migrations() {
			ms = append(ms, migrationRef{Version: m.Version, Name: m.Name})
		}
		return ms
	}
	for _, m := range postgres.Migrations() {
		ms = append(ms, migrationRef{Version: m.Version, Name: m.Name})
	}
	return ms
}

type migrationStatus struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	// AppliedAt is nil for a migration the database lacks.
	AppliedAt *time.Time `json:"applied_at"`
	// Known is false for a migration the database has and this binary does
	// not embed (a newer binary applied it).
	Known bool `json:"known"`
}

type statusOutput struct {
	Current    int               `json:"current"`
	Needed     int               `json:"needed"`
	UpToDate   bool              `json:"up_to_date"`
	Migrations []migrationStatus `json:"migrations"`
}

func (a *app) migrateStatusCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Show the database's schema version and the version this binary needs",
		Long: `status prints each migration this binary embeds, and any the database has
that it does not, with when it was applied; then the database's schema
version against the version this binary needs.

It exits 0 when the database is up to date (or ahead), and 5 when it is
behind: then run 'durable migrate'.`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			s, err := a.open(ctx, false)
			if err != nil {
				return err
			}
			sc, err := a.schemaVersion(ctx, s)
			if err != nil {
				return err
			}
			current, needed := sc.Have, sc.Want
			applied, err := s.ListAppliedMigrations(ctx)
			if err != nil {
				return err
			}
			out := statusOutput{Current: current, Needed: needed, Migrations: []migrationStatus{}}
			out.UpToDate = out.Current >= out.Needed
			byVersion := map[int]store.AppliedMigration{}
			for _, m := range applied {
				byVersion[m.Version] = m
			}
			for _, m := range knownMigrations(a.db.kind) {
				ms := migrationStatus{Version: m.Version, Name: m.Name, Known: true}
				if am, ok := byVersion[m.Version]; ok {
					ms.AppliedAt = &am.AppliedAt
					delete(byVersion, m.Version)
				}
				out.Migrations = append(out.Migrations, ms)
			}
			for _, am := range applied {
				if _, unknown := byVersion[am.Version]; unknown {
					out.Migrations = append(out.Migrations, migrationStatus{Version: am.Version, Name: am.Name, AppliedAt: &am.AppliedAt})
				}
			}

			if a.json {
				if err := writeJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "VERSION\tNAME\tAPPLIED")
				for _, m := range out.Migrations {
					at := "pending"
					if m.AppliedAt != nil {
						at = formatTime(*m.AppliedAt)
					}
					if !m.Known {
						at += " (unknown to this binary)"
					}
					fmt.Fprintf(tw, "%d\t%s\t%s\n", m.Version, clean(m.Name), at)
				}
				if err := tw.Flush(); err != nil {
					return err
				}
				switch {
				case out.Current > out.Needed && sc.Oldest > out.Needed:
					fmt.Fprintf(cmd.OutOrStdout(), "schema is at version %d, newer than this binary's %d, and needs binaries built for %d or later: upgrade durable\n",
						out.Current, out.Needed, sc.Oldest)
				case out.Current > out.Needed:
					fmt.Fprintf(cmd.OutOrStdout(), "schema is at version %d, newer than this binary's %d, which may run on it (a rolling deploy): upgrade durable when you can\n",
						out.Current, out.Needed)
				case out.UpToDate:
					fmt.Fprintf(cmd.OutOrStdout(), "schema is at version %d: up to date\n", out.Current)
				}
			}
			if !out.UpToDate {
				return &exitError{code: exitSchema, err: fmt.Errorf(
					"database schema is at version %d, this binary needs %d: run `durable migrate`", out.Current, out.Needed)}
			}
			return nil
		}),
	}
}

func (a *app) migratePrintCommand() *cobra.Command {
	var after int
	cmd := &cobra.Command{
		Use:   "print",
		Short: "Print the SQL of the migrations, to apply with your own tools",
		Long: `print writes the SQL of the migrations this binary embeds as one script, for
people who apply migrations with their own tools. Like 'durable migrate', the
script creates durable_schema_migrations and runs each migration in its own
transaction that also records it there, so engines started with
Options.SkipMigrate find the schema current. It does not touch the database.

The script is PostgreSQL's: on a SQLite file (--db, DATABASE_URL or the
development file) print is an error, as SQLite needs none; run 'durable
migrate'.

--after N leaves out the migrations up to version N: those the database has
(see 'durable migrate status'). With --json it prints the migrations as an
array of {version, name, sql, oldest_engine}, without the bookkeeping.`,
		Example: `  durable migrate print | psql "$DATABASE_URL" -v ON_ERROR_STOP=1
  durable migrate print --after 1 > upgrade.sql`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if after < 0 {
				return usageError("--after must not be negative, got %d", after)
			}
			if err := a.requirePostgres("`durable migrate print`", "SQLite needs no script; run `durable migrate`"); err != nil {
				return err
			}
			if a.json {
				type migration struct {
					Version      int    `json:"version"`
					Name         string `json:"name"`
					SQL          string `json:"sql"`
					OldestEngine int    `json:"oldest_engine"`
				}
				ms := []migration{}
				for _, m := range postgres.Migrations() {
					if m.Version > after {
						ms = append(ms, migration{Version: m.Version, Name: m.Name, SQL: m.SQL, OldestEngine: m.OldestEngine})
					}
				}
				return writeJSON(cmd.OutOrStdout(), ms)
			}
			_, err := fmt.Fprint(cmd.OutOrStdout(), postgres.MigrationScript(after))
			return err
		}),
	}
	cmd.Flags().IntVar(&after, "after", 0, "leave out the migrations up to this version")
	return cmd
}

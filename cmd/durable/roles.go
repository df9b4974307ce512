package main

import (
	_ "embed"
	"fmt"
	"regexp"
	"strings"

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/internal/store/postgres"
)

// roleNames are the three roles of the roles script.
type roleNames struct {
	Owner    string `json:"owner"`
	Worker   string `json:"worker"`
	Readonly string `json:"readonly"`
}

// roleNamePattern is what a role name may be: a lower-case SQL identifier
// that needs no quoting, at most 63 bytes (PostgreSQL's limit).
var roleNamePattern = regexp.MustCompile(`^[a-z_][a-z0-9_]{0,62}$`)

// checkRoleName returns a usage error unless name may be a role of the
// script. Only such names reach the SQL, which is also why it may sit in
// the script's DO blocks.
func checkRoleName(flag, name string) error {
	switch {
	case !roleNamePattern.MatchString(name):
		return usageError("--%s %q: a role name here is 1 to 63 lower-case letters, digits and underscores, not starting with a digit", flag, name)
	case strings.HasPrefix(name, "pg_"), name == "public", name == "none":
		return usageError("--%s %q: PostgreSQL reserves this role name: pick another", flag, name)
	}
	return nil
}

// rolesScript returns the roles script for n, or a usage error naming the
// flag whose name cannot be used.
func rolesScript(n roleNames) (string, error) {
	for _, f := range []struct{ flag, name string }{{"owner", n.Owner}, {"worker", n.Worker}, {"readonly", n.Readonly}} {
		if err := checkRoleName(f.flag, f.name); err != nil {
			return "", err
		}
	}
	if n.Owner == n.Worker || n.Owner == n.Readonly || n.Worker == n.Readonly {
		return "", usageError("--owner, --worker and --readonly must be three different roles, got %q, %q and %q", n.Owner, n.Worker, n.Readonly)
	}
	return postgres.RolesScript(postgres.Roles{Owner: n.Owner, Worker: n.Worker, Readonly: n.Readonly})
}

func (a *app) migrateRolesCommand() *cobra.Command {
	n := roleNames{}
	cmd := &cobra.Command{
		Use:   "roles",
		Short: "Print the SQL that creates least-privilege roles: owner, worker, read-only",
		Long: `roles prints a SQL script that an administrator runs once per database to
create three roles and grant each what it needs, and no more:

  the owner (--owner) owns the durable_* tables and runs the migrations:
  'durable migrate', or engine.New without Options.SkipMigrate;

  the worker (--worker) is for the engine: engine.New with
  Options.SkipMigrate, Run, Start, Signal and the rest; and for the commands
  that change runs: workflow signal, cancel and terminate, dlq redrive. It
  may read and write rows and nothing else: no CREATE, ALTER, DROP or
  TRUNCATE;

  the read-only role (--readonly) is for the inspection commands: workflow
  list, describe and history, stats, dlq list and show. SELECT only.

Tables that already exist pass to the owner. Default privileges give the
worker and read-only roles the same access to the tables the owner creates
later, so run later migrations as the owner. The script creates the roles
with LOGIN and no password; it is safe to run again. It does not touch the
database: pipe it to psql as an administrator. The role names are its only
parameters: lower-case letters, digits and underscores.

The script is PostgreSQL's: on a SQLite file (--db, DATABASE_URL or the
development file) roles is an error, as a SQLite file has no roles.`,
		Example: `  durable migrate roles | psql "postgres://admin@db.internal/app" -v ON_ERROR_STOP=1
  durable migrate roles --owner app_durable_owner --worker app_durable --readonly app_durable_ro > roles.sql
  durable migrate --db "postgres://durable_owner@db.internal/app"
  durable workflow list --db "postgres://durable_readonly@db.internal/app"`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			script, err := rolesScript(n)
			if err != nil {
				return err
			}
			if err := a.requirePostgres("`durable migrate roles`", "a SQLite file has no roles, whoever may read and write the file may use it; run `durable migrate` to set it up"); err != nil {
				return err
			}
			if a.json {
				return writeJSON(cmd.OutOrStdout(), struct {
					roleNames
					SQL string `json:"sql"`
				}{n, script})
			}
			_, err = fmt.Fprint(cmd.OutOrStdout(), script)
			return err
		}),
	}
	f := cmd.Flags()
	f.StringVar(&n.Owner, "owner", "durable_owner", "the role that owns the tables and runs migrations")
	f.StringVar(&n.Worker, "worker", "durable_worker", "the role engines and the commands that change runs connect as")
	f.StringVar(&n.Readonly, "readonly", "durable_readonly", "the role the inspection commands connect as")
	return cmd
}

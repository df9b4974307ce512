package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
)

// Exit codes, documented in the root command's long help.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitUnreachable = 4
	exitSchema      = 5
)

// connectTimeout bounds connecting when the URL sets no connect_timeout.
const connectTimeout = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args and returns the process's exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	a := &app{stderr: stderr}
	defer a.close()
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root, checkUTF8(args)
	if err == nil {
		cmd, err = root.ExecuteContextC(ctx)
	}
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if !errors.As(err, &ee) {
		// Errors that do not come from an action come from cobra: an
		// unknown command or flag, a wrong number of arguments.
		ee = &exitError{code: exitUsage, err: err}
	}
	fmt.Fprintf(stderr, "durable: %v\n", ee.err)
	if ee.code == exitUsage {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	}
	return ee.code
}

// exitError carries the exit code an error calls for.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as the caller's mistake (exit code 2).
func usageError(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// notFound marks err as naming something that does not exist (exit code 3).
func notFound(format string, args ...any) error {
	return &exitError{code: exitNotFound, err: fmt.Errorf(format, args...)}
}

// classify gives err the exit code it calls for, unless it has one.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	var (
		ce    *pgconn.ConnectError
		pgErr *pgconn.PgError
	)
	switch {
	case errors.As(err, &ce):
		return &exitError{code: exitUnreachable, err: err}
	case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
		return &exitError{code: exitFailure, err: fmt.Errorf("%w\n%s", err, privilegeHint)}
	case errors.Is(err, store.ErrNotFound):
		return &exitError{code: exitNotFound, err: err}
	}
	return &exitError{code: exitFailure, err: err}
}

// privilegeHint follows a permission error: which role each command needs.
const privilegeHint = `the database user lacks a privilege this command needs: connect as the role made for it (see 'durable migrate roles --help'):
the owner role for migrate; the worker role for workflow signal, cancel and terminate and dlq redrive;
the read-only role suffices for workflow list, describe and history, stats and dlq list and show`

// action adapts fn to cobra, classifying its errors for the exit code.
func action(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return classify(fn(cmd, args))
	}
}

// app holds the global flags and what the command opened on its database,
// on first use: a PostgreSQL pool or a SQLite store, and the engines of the
// commands that change runs. close releases them.
type app struct {
	dbURL  string
	json   bool
	stderr io.Writer
	// db is the database the command line names, once read (see database).
	db      *database
	pool    *pgxpool.Pool
	lite    *sqlite.Store
	engines []*engine.Engine
}

// rootLong is the root command's long help; dev is the development
// database's path.
func rootLong(dev string) string {
	return `durable operates a durable workflow engine's database, PostgreSQL or a SQLite
file: it applies the schema migrations; lists and inspects workflow runs and
their histories; signals, cancels and terminates runs; lists, inspects and
redrives dead letters; and shows queue statistics. It talks to the database
only; no worker needs to run. Commands that change something (workflow
signal, cancel and terminate, dlq redrive) record the change there, and the
workers act on it.

The database is --db, else $DATABASE_URL, else the development SQLite file
the examples use, ` + dev + `
(durable names it on stderr when it uses it). --db and DATABASE_URL take:
  postgres://user@host:port/database   PostgreSQL (or libpq's key=value form)
  PATH, sqlite:PATH or file:PATH       a SQLite file
A program running an engine on a SQLite file sees what durable changes there
at its next poll (engine.Options.PollInterval). The scripts of 'durable migrate
print' and 'durable migrate roles' are PostgreSQL's only.

Output is for people; --json gives machine output instead. Workflow inputs
and results are printed only when asked for with --payloads.

Exit codes:
  0  ok
  1  error, such as a workflow whose runs have all closed
  2  usage error: unknown command or flag, bad flag value, wrong arguments
  3  not found: no workflow, run or dead letter with that ID
  4  database unreachable: check --db or DATABASE_URL, and that PostgreSQL runs
     or the SQLite file is there and this user may read and write it
  5  schema out of date: the database is behind this binary; run ` + "`durable migrate`"
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "durable",
		Short: "Operate a durable workflow database: migrate, inspect and control runs, redrive dead letters",
		Long:  rootLong(engine.DevDatabase()),
		Example: `  durable migrate
  durable workflow list --status running --since 24h
  durable workflow describe onboard:ada@example.com
  durable workflow history onboard:ada@example.com --json
  durable workflow signal onboard:ada@example.com approve --payload '"yes"'
  durable dlq redrive --all`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&a.dbURL, "db", "",
		"the database: postgres://user@host:port/database, or a SQLite file's path (or sqlite:PATH)\n(default $DATABASE_URL, else the development file "+engine.DevDatabase()+")")
	root.PersistentFlags().BoolVar(&a.json, "json", false, "print machine-readable JSON")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: exitUsage, err: err}
	})
	wf := a.workflowCommand()
	a.addWorkflowControl(wf)
	root.AddCommand(a.migrateCommand(), wf, a.activityCommand(), a.dlqCommand(), a.statsCommand(), a.vetCommand())
	return root
}

// groupCommand returns a command that only holds subcommands: alone it
// prints its help, with an argument it is a usage error.
func groupCommand(use, short, long string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Long:  long,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageError("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return cmd.Help()
		},
	}
}

// checkUTF8 refuses command-line arguments (flag values included) that are
// not valid UTF-8: PostgreSQL text holds nothing else (and the SQLite store
// refuses what PostgreSQL cannot hold), so no workflow ID, type or reason
// can be one, and the database would answer with an error of its own.
func checkUTF8(args []string) error {
	for _, arg := range args {
		if !utf8.ValidString(arg) {
			return usageError("argument %q is not valid UTF-8: no workflow ID, name or reason can hold it", arg)
		}
	}
	return nil
}

// exactArgs is cobra.ExactArgs with an error that names the arguments.
func exactArgs(n int, names string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageError("%s takes %s, got %d argument(s)", cmd.CommandPath(), names, len(args))
		}
		return nil
	}
}

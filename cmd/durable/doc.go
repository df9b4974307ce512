// Command durable operates the database of a durable workflow engine,
// PostgreSQL or a SQLite file: it migrates the schema, lists and inspects
// workflow runs, signals, cancels and terminates them, and redrives dead
// letters.
//
// It talks to the database only, so it works whether or not any worker runs.
// Most commands only read; workflow signal, cancel and terminate and dlq
// redrive change runs, by writing what the engine's own calls write
// (engine.Signal, Cancel, Terminate, Redrive), and the workers act on it.
// Every command has help (durable help, durable workflow list --help), and
// `durable completion bash|zsh|fish|powershell` prints a shell completion
// script.
//
// # Commands
//
//	durable migrate                 apply the migrations the database lacks
//	durable migrate status          applied vs needed schema version
//	durable migrate print [--after N]
//	                                the migrations' SQL, for your own tools (PostgreSQL)
//	durable migrate roles [--owner R] [--worker R] [--readonly R]
//	                                SQL creating least-privilege roles (PostgreSQL)
//	durable workflow list [--status S] [--type T] [--id ID] [--since 24h] [--limit N]
//	                                runs, newest first
//	durable workflow describe ID [--run RUN_ID] [--payloads]
//	                                a run's state, pending activities and timers
//	durable workflow history ID [--run RUN_ID] [--payloads]
//	                                a run's events
//	durable workflow signal ID NAME [--payload JSON | --payload-file F]
//	                                send a signal to the open run
//	durable workflow cancel ID [--reason R]
//	                                ask the open run to cancel
//	durable workflow terminate ID [--reason R]
//	                                stop the open run at once
//	durable dlq list [--kind K] [--type T] [--all] [--limit N]
//	                                dead letters not yet redriven
//	durable dlq show ID [--payloads]
//	                                one dead letter, its whole last error
//	durable dlq redrive ID... | --all [--kind K] [--type T]
//	                                run dead letters again
//	durable stats [--window D]      queue backlogs, timers, dead letters
//
// # The database
//
// The database is --db, else $DATABASE_URL, else the development SQLite
// file that the examples use (engine.DevDatabase: durable/dev.db in the
// user's cache directory), which durable then names on stderr. The store
// comes from the DSN as engine.Open reads it: postgres://... or
// postgresql://... (or libpq's key=value form) is PostgreSQL; PATH,
// sqlite:PATH or file:PATH is a SQLite file. Another scheme is a usage
// error.
//
// Every command works on both, except migrate print and migrate roles,
// whose scripts are PostgreSQL's: on SQLite they are a usage error (exit 2),
// as SQLite needs no script. migrate creates a SQLite file, and its
// directory, if they are not there; to the other commands a missing file
// is an error (exit 4) that names it, as is one that is not a database.
// A program running an engine on a SQLite file sees what durable changes
// there (a signal, a cancel, a redrive) at its next poll
// (engine.Options.PollInterval), not at once: SQLite has nothing like
// PostgreSQL's LISTEN/NOTIFY to wake it from another process.
//
// # Changing runs
//
// signal, cancel and terminate act on the workflow ID's open run. A signal's
// payload is one JSON value (default null). cancel and terminate record a
// reason in the run's history, by default "by $USER from the durable CLI".
// A workflow ID with no run exits 3; one whose runs have all closed exits 1
// and names the last run's status. With --json they print
// {"workflow_id": ID, "done": "signal"|"cancel"|"terminate"}.
//
// # Global flags
//
// --db names the database (see The database); a PostgreSQL URL without
// connect_timeout gets 10 seconds. --json prints machine-readable JSON
// instead of tables: history --json prints the events as history.Event
// encodes them.
//
// # Payloads
//
// Workflow and activity inputs and results may hold personal data, so the
// command never prints them unasked: the listings (workflow list, dlq list,
// stats) never do; describe, history and dlq show do only with --payloads,
// and history --json writes them as null without it.
//
// # Roles
//
// On PostgreSQL, 'durable migrate roles' prints the SQL that creates three
// roles: an owner
// that runs migrate, a worker for engines and for signal, cancel, terminate
// and dlq redrive, and a read-only role for the other commands. A command
// refused for want of a privilege says which role it needs. See
// docs/security.md.
//
// # Exit codes
//
// Scripts can rely on these:
//
//	0  ok
//	1  error, such as a workflow whose runs have all closed
//	2  usage error: unknown command or flag, bad flag value, wrong arguments
//	3  not found: no workflow, run or dead letter with that ID
//	4  database unreachable: PostgreSQL does not answer, or the SQLite file is missing or cannot be opened
//	5  schema out of date: the database is behind this binary (run `durable migrate`)
//
// `durable migrate status` exits 5 when the database is behind, so
// `durable migrate status || durable migrate` brings it up to date.
package main

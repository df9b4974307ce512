// Command durable operates the PostgreSQL database of a durable workflow
// engine: it migrates the schema and lists and inspects workflow runs.
//
// It talks to the database only, so it works whether or not any worker runs,
// and it never changes a run. Every command has help (durable help, durable
// workflow list --help), and `durable completion bash|zsh|fish|powershell`
// prints a shell completion script.
//
// # Commands
//
//	durable migrate                 apply the migrations the database lacks
//	durable migrate status          applied vs needed schema version
//	durable migrate print [--after N]
//	                                the migrations' SQL, for your own tools
//	durable workflow list [--status S] [--type T] [--id ID] [--since 24h] [--limit N]
//	                                runs, newest first
//	durable workflow describe ID [--run RUN_ID] [--payloads]
//	                                a run's state, pending activities and timers
//	durable workflow history ID [--run RUN_ID] [--payloads]
//	                                a run's events
//
// # Global flags
//
// --db URL names the database (default $DATABASE_URL, else
// postgres://postgres@127.0.0.1:5432/postgres); a URL without
// connect_timeout gets 10 seconds. --json prints machine-readable JSON
// instead of tables: history --json prints the events as history.Event
// encodes them.
//
// # Payloads
//
// Workflow and activity inputs and results may hold personal data, so the
// command never prints them unasked: describe and history show them only
// with --payloads, and history --json writes them as null without it.
//
// # Exit codes
//
// Scripts can rely on these:
//
//	0  ok
//	1  error
//	2  usage error: unknown command or flag, bad flag value, wrong arguments
//	3  not found: no workflow or run with that ID
//	4  database unreachable
//	5  schema out of date: the database is behind this binary (run `durable migrate`)
//
// `durable migrate status` exits 5 when the database is behind, so
// `durable migrate status || durable migrate` brings it up to date.
package main

// Package sqlite implements the engine's store (store.Store) on one SQLite
// file, with the pure-Go driver modernc.org/sqlite: no database server and
// no C toolchain. It is for development, tests and single-process tools; a
// deployment with several engine processes, or much throughput, wants the
// PostgreSQL store (store/postgres).
//
// # One writer
//
// SQLite lets one transaction write at a time, so the store does not pretend
// otherwise. Every method that writes is one transaction of plain statements
// on the store's one writer connection, begun with BEGIN IMMEDIATE: it takes
// the database's write lock at once, so its reads and writes see no other
// writer, and the claims that Postgres makes with FOR UPDATE SKIP LOCKED are
// here an UPDATE of the rows a SELECT picked, in the same transaction. The
// fences are those of the Postgres store: a workflow task's claim token
// (from one counter, never reused), an activity task's ID (never reused:
// AUTOINCREMENT) and attempt, and a run's next event ID. Reads go to a
// separate pool of connections: in WAL mode they see the last commit and do
// not wait for the writer.
//
// The connections run with journal_mode=WAL, busy_timeout=5000 (a second
// store on the file waits up to 5 s for the write lock instead of failing)
// and synchronous=FULL: a commit returns once it is on disk, so a step the
// engine has committed (an activity's attempt number, its fence, above all)
// survives a power cut, as with Postgres's synchronous_commit.
//
// # Schema
//
// The tables are the Postgres store's, durable_* (migrations/), with SQLite's
// types: TEXT run IDs, INTEGER AUTOINCREMENT task and dead-letter IDs, JSON
// as TEXT checked with json_valid. There are no foreign keys, as in
// Postgres (its migration 0003 dropped them): every write that adds a row
// of a run reads or writes the run in the same transaction.
//
// # Time
//
// Times are kept as INTEGER microseconds since the Unix epoch (what Postgres
// keeps) and come back as UTC. As store.Store requires, the store reads no
// clock but in Now: in one process, the machine's clock is the database's.
//
// # Notes
//
// SQLite has no LISTEN/NOTIFY. Notify delivers in process, to every Listen
// of every Store open on the same file (by its absolute path) in this
// process. Several processes on one file are not supported in this
// version: their writes would be safe (SQLite locks the file), but no note
// would cross from one process to another, and each would see the others'
// work only when it polls.
//
// # Group commit
//
// StartGroupCommit does nothing: group commit shares one Postgres commit
// (a WAL flush and a transaction's overhead) among many writes, where here
// there is one writer and each commit is already one fsync-bound
// transaction on it.
//
// # Text
//
// The store refuses and escapes what the Postgres store does (see
// store.ErrUnstorable and store.EscapeText), though SQLite could hold it: a
// workflow that runs on one store runs on the other.
package sqlite

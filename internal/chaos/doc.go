// Package chaos is the reliability rig: it runs a real workload on several
// real worker processes while it kills, pauses and disconnects them, stops
// and crashes PostgreSQL, and then proves from the database and the logs
// that nothing was lost.
//
// Run starts a private PostgreSQL cluster (internal/pgcluster: never a
// shared server, since the rig stops it), worker processes that re-execute
// the host program (see IsWorker and WorkerMain), and a driver that starts
// workflows from a client-only engine, signals them and waits for their
// results. The workflow runs sequential and parallel activities (short,
// some failing before they succeed), a heartbeating activity, a durable
// timer, an activity that applies its effect with engine.ExactlyOnce, and
// waits for the driver's signals; its result is a function of its input.
//
// # Faults
//
// At random intervals (Options): one worker SIGKILLed and restarted; all of
// them at once; a worker that holds claims SIGSTOPped past its lease and
// then resumed (a zombie whose writes fencing must refuse); the server
// stopped for up to two seconds, alternately with pg_ctl stop -m fast and
// -m immediate; random connections ended with pg_terminate_backend. The
// driver logs each fault with its time and the process it hit.
//
// # Invariants
//
// The checker runs over the database once the workers have stopped:
//
//   - every workflow has one run, completed with the result its input
//     implies;
//   - each history's event IDs are exactly 1..n, and it replays cleanly;
//   - no activity has more than one completion in history;
//   - every activity execution recorded in the ledger (a table the
//     activities write without deduplication) after the first of its
//     idempotency key is explained by a kill, pause or database fault
//     during the one before, or by that one's worker logging that its
//     outcome write failed or was refused (its lease had expired);
//   - the exactly-once helper's effects table holds exactly one effect per
//     idempotency key;
//   - no timer fired before its due time, by the database clock (a trigger
//     records clock_timestamp() at each fire) or the engine's, or twice;
//   - nothing is left claimed, ready or open.
//
// The workers log as JSON to one file per slot; the rig counts from them
// the writes fencing refused (stale writes) and the lines the background
// loops write while the database is away.
//
// # Modes
//
// The short mode (ShortOptions) runs as an ordinary test of this package;
// the long mode is `go run ./cmd/durable-chaos -workflows 10000 -duration 30m`.
// Both run the same code.
package chaos

// Package chaos is the reliability rig: it runs a real workload on several
// real worker processes while it kills, pauses and disconnects them, stops
// and crashes PostgreSQL, and then proves from the database and the logs
// that nothing was lost.
//
// Run starts a private PostgreSQL cluster (internal/pgcluster: never a
// shared server, since the rig stops it), worker processes that re-execute
// the host program (see IsWorker and WorkerMain), and a driver that starts
// workflows from a client-only engine, signals them and waits for their
// results, recording what each call answered. Every engine has the same
// payload codec (AES-GCM).
//
// # Workload
//
// Five kinds of workflow (Kind). Flow runs sequential and parallel
// activities (short, some failing with a text PostgreSQL cannot hold before
// they succeed), a heartbeating activity, a durable timer, an activity that
// applies its effect with engine.ExactlyOnce, and waits for the driver's
// signals; its result is a function of its input. Some Flows first get a
// signal from an engine whose payload key is wrong, which must refuse it.
// Drain is started with SignalWithStart and counts, in its closing task,
// the signals the driver sends around that task. Fail fails with a text
// holding a NUL byte and invalid UTF-8. Versioned loops around
// workflow.GetVersion while the rig upgrades every worker to a second
// generation of the code. Spin never yields: the driver terminates it once
// its task has failed with a deadlock error.
//
// # Faults
//
// At random intervals (Options): one worker SIGKILLed and restarted; all of
// them at once; a worker that holds claims SIGSTOPped past its lease and
// then resumed (a zombie whose writes fencing must refuse); the server
// stopped for up to two seconds, alternately with pg_ctl stop -m fast and
// -m immediate; random connections ended with pg_terminate_backend. The
// driver logs each fault with its time and the processes it hit.
//
// # Invariants
//
// Triggers (schema.go) record every write to the task tables: who wrote,
// who held the row before and after, in which transaction, by the database
// clock. The checker runs over the database once the workers have stopped:
//
//   - every workflow has one run, ended as its kind requires, with the
//     result its input implies;
//   - each history's event IDs are exactly 1..n, nothing follows its close,
//     and it replays cleanly, results compared;
//   - no activity has more than one completion in history;
//   - no signal a Drain was told was delivered is missing from its result;
//   - every outcome, heartbeat and commit the database accepted was written
//     by the claim or attempt that held the row, and every claim took a
//     free row, by the database clock (fencing.go);
//   - every activity execution recorded in the ledger (a table the
//     activities write without deduplication) after the first of its
//     idempotency key is explained (ledger.go): the database shows the
//     earlier attempt lost its claim, and a fault hit its worker or its
//     connection during it, or its worker logged the lost write;
//   - the exactly-once helper's effects table holds exactly one effect per
//     idempotency key;
//   - no timer fired before its due time, by the database clock or the
//     engine's, or twice, and each was set on the database's clock;
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

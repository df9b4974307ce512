// Package engine runs workflows and activities on a database: PostgreSQL, or
// a SQLite file.
//
// An [Engine] is both the client and the worker. As a client it starts
// workflows ([Start], [StartTx]), enqueues jobs and waits for results; once
// [Engine.Run] is called it is also a worker that runs workflow tasks,
// activities and timers. There is one kind of process and no server: run as
// many engines as you like, in one program or on many machines, against one
// PostgreSQL database, which is the only thing they coordinate through: work
// is claimed and held as a lease, every state change is one transaction, and
// notifications tell idle workers that work is ready. A SQLite file needs
// nothing installed and serves one process: development, tests, a
// single-process tool (docs/stores.md).
//
// [Open] picks the store from a DSN; [New] takes a pgx pool of yours.
//
//	eng, err := engine.Open(ctx, engine.DefaultDSN(), engine.Options{}) // $DATABASE_URL, else a SQLite file; migrates
//	defer eng.Close()
//	engine.RegisterWorkflow(eng, Onboard, engine.WorkflowOptions{})
//	engine.RegisterActivity(eng, ChargeCard, activity.Options{Retry: activity.RetryPolicy{MaximumAttempts: 5}})
//	go eng.Run(ctx) // workers, timers, wake-ups; cancel ctx to drain and stop
//	run, err := engine.Start(ctx, eng, Onboard, in, engine.StartOptions{ID: "onboard:" + in.Email})
//	res, err := run.Result(ctx) // an OnboardResult
//
// Go methods cannot take type parameters, so the typed entry points
// ([RegisterWorkflow], [RegisterActivity], [Start], [StartTx], [GetRun],
// [Enqueue]) are functions that take the *Engine.
//
// # Registration and names
//
// [RegisterWorkflow] and [RegisterActivity] make functions runnable by this
// engine's workers. History records functions by name, not by pointer, so the
// name must stay stable across deploys. It defaults to the function's name
// without its package ("ChargeCard" for example.com/billing.ChargeCard, and
// "Charge" for a method value such as biller.Charge); set
// [WorkflowOptions].Name or activity.Options.Name to choose another, which
// anonymous functions must do. Registering two functions under one name is
// an error.
//
// Register everything before calling Run. Every engine that polls a queue
// must have every workflow and activity sent to that queue: a workflow task
// of an unknown type fails and is retried, and an activity attempt of an
// unknown name fails and is retried by its policy. Workflows go to the queue
// named in [StartOptions], else in [WorkflowOptions], else [DefaultQueue];
// activities to the queue in their activity.Options, else "default". An
// engine polls the queues in [Options].Queues if set; otherwise "default"
// and every queue its registrations name.
//
// # Starting workflows
//
// [Start] records a new run in one transaction and returns a [Run] handle;
// any engine's workers then run it. It is idempotent by workflow ID
// ([StartOptions].ID): while a run with the ID is open, Start returns that
// run, with Run.Existing set, and ignores the new input; with
// [StartOptions].RejectIfRunning it returns [ErrAlreadyRunning] instead.
// Once the run has closed, the same ID starts a new run. Without an ID,
// Start uses a random UUID.
//
// On an engine whose Run serves the workflow's type and queue, Start (not
// StartTx, and not a delayed start) first runs the workflow code up to its
// first blocking call, in the calling goroutine. If by then the code has
// only started activities and timers, the run is recorded with them: the
// activities start at once, and the start costs one transaction. Otherwise
// (the code started a child, returned or failed) the run starts as usual
// and a worker runs that code again. So that code must be quick, as all
// workflow code should: it is bounded by [Options].WorkflowDeadlockTimeout,
// and a Start whose context has less time left than that leaves it to a
// worker. Starts from many goroutines of one process share transactions
// when they overlap (see [Options].CommitGroupSize), also in a process that
// never calls Run, such as an API server.
//
// [StartTx] records the run inside the caller's pgx.Tx: the run exists if and
// only if the transaction commits, so a row and the workflow that must follow
// it are written together (the transactional outbox, built in). The wake-up
// for the workers is a NOTIFY sent at commit.
//
// # Running and shutting down
//
// [Engine.Run] blocks until its context is done. For each queue it polls it
// runs up to [QueueOptions].WorkflowConcurrency workflow tasks and
// [QueueOptions].ActivityConcurrency activities at once, and it fires due
// timers. Idle workers wait for a notification that work is ready, or for
// the backstop poll every [Options].PollInterval; nothing polls in a tight
// loop.
//
// When the context is done, Run stops claiming work, lets running tasks
// finish for up to [Options].ShutdownTimeout, then cancels the activities
// still running, gives back every claim it holds (an activity given back
// does not spend an attempt) and returns nil. Claimed work is finished or
// released, never stranded. Calling Run while it is already running returns
// an error.
//
// # Waiting for results
//
// [Run.Result] waits until the run closes and returns its typed result, or a
// *[WorkflowError] if it failed. It waits on a notification, without
// polling: the engine LISTENs for closes, also in a process that never
// calls Run. In such a process the LISTEN holds a pool connection while a
// Result waits, and for a tenth of a second after the last one returns, so
// that a loop of starts and waits keeps it; closing the pool waits that long
// for it. If a notification is lost, Result learns of the close within
// [Options].PollInterval. That backstop is one query per PollInterval for
// up to 10,000 waiting Results, and a run that closes in the process that
// waits for it hands Result its outcome without a query.
//
// [Run.Describe] returns the run's state ([RunInfo]), including the error of
// a workflow task that is being retried, and [Run.History] its events.
// [GetRun], [Engine.Describe] and [Engine.History] find the newest run of a
// workflow ID.
//
// # Workflow tasks, replay and the cache
//
// A workflow task brings a run's code up to date with its history, runs it
// until every coroutine waits, and commits what the code did (events,
// activities and timers to start, or the run's close) in one transaction.
// Only one task per run takes effect at a time, and only on the history it
// ran on: if a signal, a timer or an activity's result reached the run while
// the code ran, the task runs again with it before anything is recorded.
//
// When an activity finishes on the engine that has its run in memory (see
// the cache, below), its result and the workflow's next step are recorded
// in one write. When the run is not in that engine's memory, or has moved
// on meanwhile, the result is recorded alone and the next step runs from
// history. Which way a step goes changes its cost, never what the code
// sees. A step that does not take effect runs again, so workflow.Logger may
// write a step's lines twice.
//
// An activity may start before the step that scheduled it is recorded
// ([Options].ActivityRunAhead), so that a quick one's result is recorded
// with that step. If the step is then not recorded (the worker died or lost
// its claim), the activity runs again, as attempt 1 again, with the same
// idempotency key. Activities run at least once in any case: make their
// effects idempotent, or use [ExactlyOnce].
//
// Each engine keeps up to [Options].CacheSize runs in progress in memory, so
// a step costs the new events, not a replay. A run that waits only on timers
// leaves the cache, since it may sleep for days, unless a timer fires within
// 30 seconds. On a cache miss the workflow function runs again from the
// start against the recorded history; evicting is always safe. A task that
// hits a workflow.NonDeterminismError or a panic fails and is retried with
// growing delays (from a second up to a minute); the run stays open, waiting
// for fixed code.
//
// How the engine does this (the tables, the transaction of each step, how
// commits are grouped, the cache) is described in docs/architecture.md in
// the repository.
//
// # Leases and fencing tokens
//
// A claim is a lease: a workflow task is held for [Options].WorkflowTaskLease,
// an activity attempt for its start-to-close timeout (or, if it heartbeats,
// its heartbeat timeout, which each heartbeat extends). A lease that runs out
// makes the work claimable again by any engine. Every claim carries a token
// (a counter for workflow tasks, the attempt number for activities), and
// every write made on the strength of a claim (a commit, a completion, a
// retry, a heartbeat) checks it. A worker that stalled past its lease (a GC
// pause, a suspended VM) and wakes up finds its writes refused; a late
// duplicate completion is ignored.
//
// # Jobs, dead letters and exactly-once effects
//
// [Enqueue] and [EnqueueTx] run a registered activity as a standalone job,
// with no workflow around it. A job that fails for good, and a workflow run
// that fails, are kept as dead letters ([Engine.DeadLetters]), in the same
// transaction that records the failure; [Engine.Redrive] runs one again after
// a fix: a job with a fresh attempt budget, a workflow in a new run that
// continues from its recorded history without re-running the activities that
// completed. [ExactlyOnce] applies an activity's effects on your own database
// in a transaction that also records its idempotency key, so a redelivered
// attempt does nothing twice.
//
// # Options
//
// [Options], [QueueOptions], [WorkflowOptions] and [StartOptions] are
// structs whose zero value works; each field documents its default. The
// zero Options poll "default" and every queue a registration names, with 32
// workflow tasks and 32 activities at once per queue, log to
// slog.Default(), take the time from the database's clock, cache 10,000
// runs, lease workflow tasks for 30s, poll every 5s as a backstop, allow 30s
// for shutdown and accept payloads up to 2 MiB. [New] checks the options
// (negative values are errors) and brings the schema up to date unless
// [Options].SkipMigrate is set; then it only checks the schema's version.
// The engine never closes the pool it is given.
package engine

// Package engine runs workflows and activities on PostgreSQL.
//
// An [Engine] is both the client and the worker. As a client it starts
// workflows ([Start], [StartTx]), enqueues jobs and waits for results; once
// [Engine.Run] is called it is also a worker that runs workflow tasks,
// activities and timers. There is one kind of process and no server: run as
// many engines as you like, in one program or on many machines, against one
// database. PostgreSQL is the only thing they coordinate through: work is
// claimed with FOR UPDATE SKIP LOCKED and held as a lease, every state change
// is one transaction, and LISTEN/NOTIFY tells idle workers that work is ready.
//
//	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
//	eng, err := engine.New(pool, engine.Options{}) // migrates the durable_* tables
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
// engine polls only the queues in [Options].Queues.
//
// # Starting workflows
//
// [Start] records a new run (its WorkflowStarted event and a ready workflow
// task) in one transaction and returns a [Run] handle; any engine's workers
// then run it. An engine that runs the workflow's type on its queue starts
// eagerly: Start runs the run's first workflow task in the calling
// goroutine, before the insert, and records the run together with the
// activities and timers that task scheduled; the activities start on this
// engine's free slots at once. A first task that starts children, closes the
// run or fails leaves the run to start the ordinary way. Starts that
// overlap, from many goroutines of one process, share a transaction (up to
// [Options].CommitGroupSize; an idle engine commits each at once), also in
// an engine that never runs. It is idempotent
// by workflow ID ([StartOptions].ID): while a
// run with the ID is open, Start returns that run, with Run.Existing set,
// and ignores the new input; with [StartOptions].RejectIfRunning it returns
// [ErrAlreadyRunning] instead. Once the run has closed, the same ID starts a
// new run. Without an ID, Start uses a random UUID.
//
// [StartTx] does the same inside the caller's pgx.Tx: the run exists if and
// only if the transaction commits, so a row and the workflow that must follow
// it are written together (the transactional outbox, built in). The wake-up
// for the workers is a NOTIFY sent at commit.
//
// # Running and shutting down
//
// [Engine.Run] blocks until its context is done. For each queue in
// [Options].Queues it runs up to WorkflowConcurrency workflow tasks and
// ActivityConcurrency activities at once (an activity's outcome and the
// fused step it leads to, below, take one of as many step slots of the
// queue when one is free, so the activity's slot takes the next activity
// while the step commits; a cached run's wake runs in slots of its own, up
// to twice the workflow slots), and it runs the timer scanner (package
// timer), whose fires
// hand the tasks they make to this engine's free slots. Idle workers wait
// for a notification, or for the backstop poll every [Options].PollInterval;
// nothing polls in a tight loop.
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
// *[WorkflowError] if it failed. It waits on a notification (the engine
// LISTENs for it, even in a process that never calls Run; in such a process
// the LISTEN holds a pool connection while a Result waits, and for a tenth
// of a second after the last one returns, so that the next one finds it
// listening: closing the pool waits that long for it). As a backstop,
// for a close whose notification was lost, the engine asks every
// [Options].PollInterval which of the runs its Result calls wait for have
// closed: one statement for all of them, however many there are. A running
// engine remembers the runs it saw close in the last two seconds (here,
// with their outcome, or elsewhere, by notification), so Result called
// within two seconds of the Start that created the run on it does not read
// the run first: a run that closes in this process hands Result its outcome
// without a query. [Run.Describe] returns the
// run's state ([RunInfo]), including the error of a workflow task that is
// being retried, and [Run.History] its events. [GetRun], [Engine.Describe] and
// [Engine.History] find the newest run of a workflow ID.
//
// # Workflow tasks, replay and the cache
//
// A workflow task brings a run's code up to date with its history, runs it
// until every coroutine waits, and commits the commands it gave (events,
// activity tasks, timers, or the run's close) in one transaction. Only one
// task per run takes effect at a time: the claim guarantees it.
//
// A step of a cached run is fused: when an activity finishes on the engine
// that has its run in memory, the run applies the outcome there, at once,
// and the outcome and the commands it gave are committed in one
// transaction, fenced by the activity's attempt and the run's next event ID
// (no workflow task is claimed). The step runs in the activity's goroutine,
// in a step slot if one is free (the activity's slot is then free for the
// queue's next activity at once), and then runs the next activity the
// step scheduled on its queue, claimed by the step's transaction; if it
// scheduled none there (the run waits on something else, or closes) and the
// engine has activities waiting for a slot on that queue, the step's
// transaction claims the queue's next task. That task takes an activity
// slot when the step is done, waiting for one at most a second (or a tenth
// of its lease); if none frees up, it goes back to its queue, its attempt
// unspent. If anything
// else reached the run meanwhile (a signal, a timer, another engine), the
// commit changes nothing and the step is taken the ordinary way; what the
// workflow logged in the refused attempt is dropped. Steps that start
// children, cancel timers or continue as new record the outcome first and
// then commit the commands the run already produced. A cached run's short
// timer (under 30 seconds) is fired by its engine the same way: the run
// applies the firing, runs, and the firing and its commands are one
// transaction; if another engine fired the timer first, the run goes on
// from there.
//
// A task claimed from the queue (the first task of a run started in
// another process, a task after a signal) runs on a recorded history, so
// the one activity it schedules may start before the task commits: if it
// returns a result within [Options].ActivityRunAhead, its schedule, its
// result and what the code did next commit together, fenced by the
// task's claim and the history the task saw; otherwise the schedule
// commits alone and the result is recorded when it comes. An activity
// whose schedule did not commit runs again, attempt 1 again.
//
// Each engine keeps the code of up to [Options].CacheSize live runs in
// memory (least recently used first out), so a step costs the new events, not
// a replay. A run that waits only on timers leaves the cache at once, since
// it may sleep for days, unless a timer fires within 30 seconds. On a cache miss the workflow function runs again from
// the start against the recorded history; evicting is always safe. A task that
// hits a workflow.NonDeterminismError or a panic fails and is retried with
// growing delays (from a second up to a minute); the run stays open, waiting
// for fixed code.
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
// zero Options poll one queue, "default", with 32 workflow tasks and 32
// activities at once, log to slog.Default(), use time.Now as the clock, cache
// 10,000 runs, lease workflow tasks for 30s, poll every 5s as a backstop,
// allow 30s for shutdown and accept payloads up to 2 MiB. [New] checks the
// options (negative values are errors) and brings the schema up to date
// unless [Options].SkipMigrate is set; then it only checks the schema's
// version. The engine never closes the pool it is given.
package engine

// Package workflow is the deterministic API that workflow functions are
// written against.
//
// A workflow is an ordinary Go function with one input and one output,
//
//	func Onboard(ctx workflow.Context, in OnboardInput) (OnboardResult, error)
//
// registered with engine.RegisterWorkflow. Its progress is not kept in a
// goroutine or in memory: every command it gives (run an activity, start a
// timer, record a side effect, finish) is appended to the run's history in
// PostgreSQL, and any worker can rebuild the run at any moment by calling the
// function again from the start and feeding it that history. This works only
// if the function is deterministic: given the same history, it must give the
// same commands in the same order. What follows is that contract: what may
// run in a workflow, what may not, and what to use instead.
//
// # What runs where
//
// Workflow code runs in workflow tasks on the engine's workers. It is run
// again from the start whenever a worker has the run not in memory: after a
// restart or a deploy, on another worker, after a long sleep. Its only inputs
// are its input value and what history records; its only outputs are
// commands. It runs under the engine's control, one coroutine at a time;
// every blocking call ([Future.Get], [Sleep], [Channel.Receive],
// [Selector.Select], [Await]) yields, and once every coroutine of the run
// waits, the engine commits the commands given so far in one transaction.
//
// Activity code runs on activity workers, with a real context.Context, at
// least once, and may do anything: call services, read the clock, write to a
// database. Workflow code calls it with [ExecuteActivity], and its result is
// recorded in history: on replay the recorded result is returned and the
// activity is not run again. [Context] does not implement context.Context,
// so calling an activity function directly from workflow code does not
// compile.
//
// Inputs, results and side-effect values cross this boundary as JSON
// (encoding/json): use types whose exported fields round-trip through it.
//
// # Time: use Now, not time.Now
//
// time.Now differs on every replay. [Now] returns the time that history
// recorded for the event being processed (when the run started, when the
// activity finished, when the timer fired), so it is the same on every
// replay. The time.Time value itself is fine to compute with.
//
// # Waiting: use Sleep and NewTimer, not time.Sleep or time.After
//
// time.Sleep, time.After, time.NewTimer and time.Tick block a goroutine that
// the next replay will not have. [Sleep] and [NewTimer] start a durable
// timer: a row in the database, measured by the engine's clock, that fires
// once even if every worker restarts meanwhile. While a run waits only on
// timers it leaves the worker's memory. A [Timer] is a [Future]; give it to a
// [Selector] for "this, or a deadline", and [Timer.Cancel] the one that lost.
//
// # Concurrency: use Go, not the go statement
//
// A goroutine started with go runs outside the engine's control, in an
// order no replay can repeat, and workflow calls made from it race with the
// run. [Go] starts a workflow coroutine instead. Coroutines take turns: exactly one runs at a
// time, and they run in the order they were started, so they share variables
// without locks (sync.Mutex and sync.WaitGroup are not needed, and blocking
// on them would stall the run).
//
// # Channels and select: use Channel, Selector and Await
//
// Native channels and the select statement block outside the engine's
// control, and select chooses among ready cases at random. Use a [Channel]
// ([NewChannel], [NewBufferedChannel]) between coroutines, a [Selector] to
// wait for the first of several futures or channels (its cases are checked in
// the order they were added), and [Await] to wait until a condition on
// workflow state holds ([AwaitWithTimeout] with a durable deadline). Both
// return ErrCanceled when the run is canceled while they wait.
//
// # Randomness and IDs: use SideEffect
//
// math/rand, crypto/rand and uuid.New give a different value on every
// replay. Draw the value inside [SideEffect]: the first execution records it
// in history, and every replay returns the recorded value without calling
// the function again.
//
//	id := workflow.SideEffect(ctx, func() string { return uuid.NewString() })
//
// A side effect must not fail or block; anything that can fail belongs in an
// activity.
//
// # Map iteration: sort the keys
//
// Go randomizes the order of range over a map. When the order decides which
// commands are given, or in what order, iterate over sorted keys:
//
//	for _, k := range slices.Sorted(maps.Keys(m)) {
//		futures = append(futures, workflow.ExecuteActivity(ctx, Notify, m[k]))
//	}
//
// # I/O, network, databases and shared state: use activities
//
// Files, HTTP calls, SQL, message queues, and package-level variables that
// other code changes all give answers that history does not record, and
// their effects would repeat on every replay. Put them in activities and
// call those with [ExecuteActivity]. For logging, use [Logger] rather than
// fmt or log, so that each line is written once.
//
// # Configuration: pass it in the input
//
// os.Getenv, flags, configuration files and feature flags can change between
// the first execution and a replay. Read them where the workflow is started
// and pass the values in its input (or read them in an activity, whose
// result is recorded).
//
// # How replay works
//
// A run's history numbers its events 1, 2, 3...; some are commands the code
// gave (ActivityScheduled, TimerStarted, TimerCanceled, SideEffectRecorded,
// WorkflowCompleted, WorkflowFailed), the others report what happened
// (WorkflowStarted, ActivityCompleted, ActivityFailed, TimerFired). A worker
// keeps recently run workflows in memory, so a step usually feeds only the
// new events to the live code. Otherwise it calls the function from the start
// and feeds it the whole history. Each command the code gives is matched
// against the next command recorded: same kind, same sequence number (the
// order in which the code asked), and for an activity the same registered
// name. Inputs, options and timer durations are not compared: a replayed
// activity returns its recorded result, and a replayed timer keeps its
// recorded fire time. Commands past the end of history are new, and the
// engine records them.
//
// When code and history disagree (an activity was reordered, renamed, added
// before existing steps, or removed), the workflow task fails with a
// *[NonDeterminismError] naming the run, the event ID, what history recorded
// and what the code did, at which file:line:
//
//	non-determinism in run 3f6c… at event 2: history has ActivityScheduled(Add, seq 1),
//	code did ActivityScheduled(Double, seq 1) at /src/billing/flow.go:31; the run
//	waits until code that matches its history is deployed
//
// The run does not fail. It keeps its history and status, the error is shown
// by the engine's Describe (RunInfo.TaskError), and the task is retried with
// growing delays until a worker runs code that matches. Deploy a fix, or roll
// back. Changes that keep the sequence of commands (new code after the last
// recorded command, different logic between commands) are safe for runs in
// flight. To change the sequence for new runs while old runs finish on the
// old code, put the change behind [GetVersion] (docs/versioning.md), or
// register the new function under a new name and start new runs with it.
//
// # Logging during replay
//
// [Logger] returns a *slog.Logger that carries the run's identity and drops
// every record while the code replays events an earlier workflow task already
// processed, so each line is logged once however often the run is rebuilt.
// [IsReplaying] reports the same state for other uses; workflow logic must not
// depend on it.
//
// # Errors and panics
//
// Returning an error from the workflow function fails the run: its history
// ends with WorkflowFailed, and the engine's Run.Result returns the error's
// message in an *engine.WorkflowError. An
// activity that fails for good returns an *[ActivityError] from Get, which
// the workflow may handle (compensate, try something else) or return.
//
// A panic in workflow code does not fail the run. It fails the workflow task,
// with a *[PanicError] holding the value and stack, which the engine logs and
// keeps on the run; the worker goes on serving other runs, and the task is
// retried with growing delays until fixed code is deployed.
//
// # Loops and long computations: yield, or use an activity
//
// Workflow code must yield (return, or make a blocking call) within the
// engine's deadlock bound, engine.Options.WorkflowDeadlockTimeout (1s by
// default). A loop that makes no blocking workflow call, such as
//
//	for !done { } // done is set by nothing that can run meanwhile
//
// or a long computation, would otherwise hold the worker's slot, and an
// eager Start, for ever. The engine's deadlock detector (Temporal's has the
// same name and bound) fails the workflow task instead, with a
// *[DeadlockError] naming the run, the file:line where the code was, and its
// stack; like a panic, the run does not fail and the task is retried with
// growing delays until fixed code is deployed. Compute in an activity; wait
// with [Await] on a condition, or with [Sleep].
//
// Go cannot stop a goroutine, so the code that did not yield goes on running
// on its own goroutine, using a CPU, until it yields or returns; a loop that
// never ends runs until the process exits. It can never write: the executor
// it belonged to is poisoned (every later step of it fails with the same
// error) and discarded, never committed nor kept in the worker's cache; at
// its next blocking call the goroutine exits, and what it produced is
// dropped. Its run's other coroutines wait, parked, until it has exited, so
// that workflow code never runs on two goroutines at once. While it runs,
// every task of its run on that process fails at once with its error rather
// than run the code again, so a run leaves one such goroutine per process,
// not one per retry. Terminating the run does not stop it either.
package workflow

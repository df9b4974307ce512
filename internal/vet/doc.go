// Package vet holds durablevet, a go/analysis analyzer that reports
// non-deterministic constructs in workflow code.
//
// Workflow code is replayed from history on any worker at any time, so it
// must give the same commands in the same order on every replay (the contract
// in the workflow package's documentation). The analyzer finds the code that
// replays and reports what breaks that contract, each time with the
// replacement to use and the workflow that reaches the line:
//
//	onboarding.go:41:9: time.Now in workflow code is not deterministic: use workflow.Now(ctx) (reached from workflow Onboard via stamp)
//
// # Workflow code
//
// A workflow function is any function or func literal passed as the
// function to engine.RegisterWorkflow, and any top-level function shaped
// func(workflow.Context, In) (Out, error). Workflow code is the body of each
// workflow function, the func literals inside it, and the bodies of the
// functions and methods of the same package that it calls, transitively
// (static calls only), or passes as a function value (to workflow.Go, a
// Selector callback, sort.Slice...). A function value or func literal whose
// first parameter is a context.Context is an activity and is not followed.
// Neither is the function given to workflow.SideEffect (it runs once, and
// its result is recorded) or to workflow.ExecuteActivity.
//
// # What it reports
//
//   - time.Now, Sleep, After, AfterFunc, Tick, NewTimer, NewTicker, Since
//     and Until: use workflow.Now, Sleep and NewTimer.
//   - the go statement: use workflow.Go.
//   - the select statement: use workflow.NewSelector.
//   - send and receive on a Go channel, and range over one: use a
//     workflow.Channel.
//   - range over a map, or over maps.Keys, maps.Values or maps.All: the
//     order is random; sort the keys.
//   - calls into math/rand, math/rand/v2, crypto/rand and the random
//     constructors of github.com/google/uuid: draw the value inside
//     workflow.SideEffect.
//   - calls into os, os/exec, syscall, io/ioutil, net, net/http,
//     database/sql and github.com/jackc/pgx/v5 (with its subpackages): do
//     I/O in an activity. os.Getenv and its kin read configuration: pass it
//     in the workflow's input.
//
// # Silencing a reviewed line
//
// A comment
//
//	//durable:nondeterministic-ok <reason>
//
// on the line of a finding, or on the line above it, silences the findings
// on that line. The reason is required: a directive without one is itself
// reported.
//
// # Running it
//
//	go run ./cmd/durable-vet ./...
//
// The cmd/durable-vet command takes the usual go/analysis flags (-json,
// -c=N for context lines, -test=false to skip test files) and exits 3 when
// it reports something. [Check] runs the analyzer for a command that
// chooses its own output and exit codes.
package vet

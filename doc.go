// Package durable is a durable workflow engine for Go that needs nothing but
// PostgreSQL.
//
// The code lives in its subpackages: [github.com/durable-go/durable/workflow]
// for workflow code, [github.com/durable-go/durable/activity] for activity
// code, [github.com/durable-go/durable/engine] to register, start and run
// them, and [github.com/durable-go/durable/durabletest] to test them on a
// clock that skips time. This package holds only the repository-wide replay
// test: every history under testdata/histories replays against today's code.
package durable

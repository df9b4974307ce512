// Package history defines the events that make up a workflow run's history and
// their encoding.
//
// A run's history is an append-only list of events numbered 1..n. It is the one
// source of truth for a run: a worker that crashes or is redeployed rebuilds the
// run by replaying workflow code against it.
//
// # Events
//
// Every event carries an Attributes value: a struct named for what happened
// ([ActivityScheduled], [TimerFired], ...). The set is sealed; each type has a
// stable wire name ("activity_scheduled") that is never reused for anything else.
//
// Events are of two kinds. Command events ([Attributes.IsCommand] is true) are
// written because workflow code asked for them: scheduling an activity, starting
// a timer, completing the run. On replay each must match, in order, what the code
// asks for again; a mismatch is a non-determinism error. All other events report
// something that happened outside the workflow: the run started, an activity
// finished, a timer fired.
//
// # Encoding
//
// [Encode] and [Decode] turn attributes into JSON and back. Payloads (inputs and
// results) are kept as raw JSON so that a stored history stays readable.
package history

package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/codec"
)

// signalNote is how one of the driver's Signal calls ended.
type signalNote struct {
	idx     int
	outcome string
}

// ledgerGens maps a run to the code generation that scheduled each of its
// activities, by seq (the ledger's gen: the highest, should a dropped
// attempt have run ahead of a schedule an older generation made).
type ledgerGens map[string]map[int64]int

// checkWorkflows checks that every workflow the driver started has one
// run, ended as its kind requires.
func (c *checker) checkWorkflows(ctx context.Context, pool *pgxpool.Pool, runs map[string]*runFacts) error {
	byWorkflow := map[string][]*runFacts{}
	for _, r := range runs {
		byWorkflow[r.workflowID] = append(byWorkflow[r.workflowID], r)
	}
	signals, err := c.driverSignals(ctx, pool)
	if err != nil {
		return err
	}
	gens, err := c.ledgerGens(ctx, pool)
	if err != nil {
		return err
	}
	rows, err := pool.Query(ctx, `SELECT workflow_id, kind, input, terminated FROM chaos_workflows ORDER BY created_at`)
	if err != nil {
		return fmt.Errorf("check: list workflows: %w", err)
	}
	var (
		id, kind   string
		raw        []byte
		terminated bool
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &kind, &raw, &terminated}, func() error {
		c.f.Workflows++
		c.f.Kinds[Kind(kind)]++
		rs := byWorkflow[id]
		switch {
		case len(rs) == 0:
			c.f.Lost++
			c.violate("workflow %s: no run at all", id)
			return nil
		case len(rs) > 1:
			c.violate("workflow %s: %d runs, want 1", id, len(rs))
		}
		r := rs[0]
		if r.status == "completed" && r.closeResult != nil && !c.samePayload(r.result, r.closeResult) {
			c.violate("workflow %s: run %s holds the result %s, its closing event %s", id, r.runID, r.result, r.closeResult)
		}
		switch {
		case Kind(kind) == KindSpin:
			c.checkSpin(id, r)
		case terminated:
			// Terminated by the driver after a violation it reported.
			if r.status != "terminated" {
				c.violate("workflow %s: run %s is %s; the driver terminated it", id, r.runID, r.status)
			}
		case Kind(kind) == KindFail:
			c.checkFail(id, r)
		case r.status != "completed":
			c.f.Lost++
			c.violate("workflow %s: run %s is %s, want completed", id, r.runID, r.status)
		default:
			return c.checkResult(id, Kind(kind), raw, r, signals[id], gens[r.runID])
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("check: workflows: %w", err)
	}
	return nil
}

// checkResult checks the result of a completed run.
func (c *checker) checkResult(id string, kind Kind, raw []byte, r *runFacts, signals []signalNote, gens map[int64]int) error {
	result, err := codec.Unwrap(c.codec, r.result)
	if err != nil {
		c.f.Lost++
		c.violate("workflow %s: run %s result does not decode: %v", id, r.runID, err)
		return nil
	}
	bad := func(want any) {
		c.f.Lost++
		c.violate("workflow %s: run %s returned %s, want %+v", id, r.runID, result, want)
	}
	switch kind {
	case KindFlow:
		var in FlowInput
		if err := json.Unmarshal(raw, &in); err != nil {
			return fmt.Errorf("input of %s: %w", id, err)
		}
		c.f.SignalsDeliveredTwice += max(r.signals-len(in.Signals), 0)
		var got FlowResult
		if err := json.Unmarshal(result, &got); err != nil || got != Expected(in) {
			bad(Expected(in))
		}
	case KindDrain:
		var (
			in  DrainInput
			got DrainResult
		)
		if err := json.Unmarshal(raw, &in); err != nil {
			return fmt.Errorf("input of %s: %w", id, err)
		}
		if err := json.Unmarshal(result, &got); err != nil || got.Seq != in.Seq {
			bad("a DrainResult")
			return nil
		}
		c.checkDrain(id, r, got, signals)
	case KindVersioned:
		var (
			in  VersionedInput
			got VersionedResult
		)
		if err := json.Unmarshal(raw, &in); err != nil {
			return fmt.Errorf("input of %s: %w", id, err)
		}
		if err := json.Unmarshal(result, &got); err != nil {
			bad("a VersionedResult")
			return nil
		}
		c.checkVersioned(id, r, in, got, gens)
	default:
		c.violate("workflow %s: unknown kind %q", id, kind)
	}
	return nil
}

// checkDrain checks that a Drain run counted every signal it was sent
// before it closed: those whose Signal call returned nil, and those its
// history holds (before its close: nothing follows a close). A lost
// signal is one the caller was told was delivered and the run never
// counted. And its first task must have seen the start's signal.
func (c *checker) checkDrain(id string, r *runFacts, got DrainResult, signals []signalNote) {
	counted := map[int]bool{}
	for _, i := range got.Indices {
		counted[i] = true
	}
	if got.Count != len(got.Indices) || len(counted) != len(got.Indices) {
		c.violate("workflow %s: run %s counted %d signals, listing %v", id, r.runID, got.Count, got.Indices)
	}
	if !got.FirstSeen {
		c.f.FirstSignalMissed++
		c.violate("workflow %s: run %s did not see in its first task the signal SignalWithStart sent with the start", id, r.runID)
	}
	lost := map[int]string{}
	for _, s := range signals {
		switch s.outcome {
		case "accepted":
			c.f.SignalsAccepted++
			if !counted[s.idx] {
				lost[s.idx] = "its Signal call returned nil"
			}
		case "closed":
			c.f.SignalsRefusedClosed++
		}
	}
	inHistory := map[int]bool{}
	for _, i := range r.drained {
		inHistory[i] = true
		if !counted[i] {
			lost[i] = "history holds it before the run's close"
		}
	}
	for _, i := range got.Indices {
		if !inHistory[i] {
			c.violate("workflow %s: run %s counted signal %d, which its history does not hold", id, r.runID, i)
		}
	}
	for _, i := range slices.Sorted(maps.Keys(lost)) {
		c.f.LostSignals++
		c.violate("workflow %s: run %s lost signal %d (%s): it returned %v", id, r.runID, i, lost[i], got.Indices)
	}
}

// checkFail checks that a Fail run ended failed with its text escaped.
// A run whose activity's attempts all ended by the faults (a panicking
// activity has two) fails with a timeout instead: counted apart.
func (c *checker) checkFail(id string, r *runFacts) {
	switch {
	case r.status != "failed":
		c.f.BadTextViolations++
		c.violate("workflow %s: run %s is %s; it must fail, with the text it failed with escaped", id, r.runID, r.status)
	case strings.Contains(r.failure, "no attempts are left"):
		c.f.BadTextLostToFaults++
	case !strings.Contains(r.failure, badTextEscaped):
		c.f.BadTextViolations++
		c.violate("workflow %s: run %s failed with %q, which does not hold the escaped text %q", id, r.runID, r.failure, badTextEscaped)
	default:
		c.f.BadTextRuns++
	}
}

// checkSpin checks a run of code that never yields: the driver terminated
// it, and nothing of its code was ever recorded (every task of it failed
// with a deadlock error): no activity in its history or the ledger, and
// nothing after its termination.
func (c *checker) checkSpin(id string, r *runFacts) {
	c.f.SpinRunsChecked++
	var bad []string
	if r.status != "terminated" {
		bad = append(bad, "it is "+r.status+", not terminated")
	}
	if r.last != "workflow_terminated" {
		bad = append(bad, "its last event is "+r.last)
	}
	if r.scheduled > 0 {
		bad = append(bad, strconv.Itoa(r.scheduled)+" activities scheduled by code that never yielded")
	}
	if n := c.ledgerRuns[r.runID]; n > 0 {
		bad = append(bad, fmt.Sprintf("the ledger holds %d of its activities", n))
	}
	if len(bad) > 0 {
		c.f.SpinViolations++
		c.violate("workflow %s: run %s of code that never yields: %s", id, r.runID, strings.Join(bad, "; "))
	}
}

// checkVersioned checks a Versioned run: one branch throughout, the
// result that branch implies, a marker exactly when the new branch was
// taken, the old branch if the first generation of the code scheduled
// any of its activities, and no return to the first generation once the
// second had scheduled one.
func (c *checker) checkVersioned(id string, r *runFacts, in VersionedInput, got VersionedResult, gens map[int64]int) {
	c.f.VersionedRuns++
	branch := -1
	if len(got.Branches) > 0 {
		branch = got.Branches[0]
	}
	var bad []string
	if want := expectedVersioned(in, branch); !reflect.DeepEqual(got, want) {
		bad = append(bad, fmt.Sprintf("returned %+v, want %+v", got, want))
	}
	if (r.markers > 0) != (branch == 1) {
		bad = append(bad, fmt.Sprintf("%d version markers on branch %d", r.markers, branch))
	}
	var seen []int
	for _, s := range slices.Sorted(maps.Keys(gens)) {
		g := gens[s]
		if len(seen) > 0 && g < seen[len(seen)-1] {
			bad = append(bad, fmt.Sprintf("activity seq %d scheduled by generation %d after generation %d", s, g, seen[len(seen)-1]))
		}
		seen = append(seen, g)
	}
	if slices.Contains(seen, 1) && branch != -1 {
		bad = append(bad, "the first generation of the code ran it, yet it took the new branch")
	}
	if slices.Contains(seen, 1) && slices.Contains(seen, 2) {
		c.f.UpgradedMidRun++
	}
	if branch == 1 {
		c.f.NewBranchRuns++
	}
	if len(bad) > 0 {
		c.f.VersionViolations++
		c.violate("workflow %s: versioned run %s: %s", id, r.runID, strings.Join(bad, "; "))
	}
}

// driverSignals reads how the driver's Signal calls ended, by workflow.
func (c *checker) driverSignals(ctx context.Context, pool *pgxpool.Pool) (map[string][]signalNote, error) {
	rows, err := pool.Query(ctx, `SELECT workflow_id, idx, outcome FROM chaos_signals`)
	if err != nil {
		return nil, fmt.Errorf("check: read the driver's signals: %w", err)
	}
	out := map[string][]signalNote{}
	var (
		id string
		s  signalNote
	)
	_, err = pgx.ForEachRow(rows, []any{&id, &s.idx, &s.outcome}, func() error {
		out[id] = append(out[id], s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read the driver's signals: %w", err)
	}
	return out, nil
}

// ledgerGens reads which code generation scheduled each versioned
// activity, and counts every run's ledger rows (c.ledgerRuns).
func (c *checker) ledgerGens(ctx context.Context, pool *pgxpool.Pool) (ledgerGens, error) {
	rows, err := pool.Query(ctx, `SELECT idempotency_key, max(gen) FROM chaos_ledger GROUP BY idempotency_key`)
	if err != nil {
		return nil, fmt.Errorf("check: read the ledger's generations: %w", err)
	}
	out := ledgerGens{}
	c.ledgerRuns = map[string]int{}
	var (
		key string
		gen int
	)
	_, err = pgx.ForEachRow(rows, []any{&key, &gen}, func() error {
		run, seqText, _ := strings.Cut(key, ":")
		c.ledgerRuns[run]++
		if gen == 0 {
			return nil
		}
		seq, err := strconv.ParseInt(seqText, 10, 64)
		if err != nil {
			return fmt.Errorf("idempotency key %q: %w", key, err)
		}
		if out[run] == nil {
			out[run] = map[int64]int{}
		}
		out[run][seq] = gen
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("check: read the ledger's generations: %w", err)
	}
	return out, nil
}

// samePayload reports whether two stored payloads hold equal JSON values
// (codec envelopes of one value differ: each has its own nonce).
func (c *checker) samePayload(a, b json.RawMessage) bool {
	pa, erra := codec.Unwrap(c.codec, a)
	pb, errb := codec.Unwrap(c.codec, b)
	var va, vb any
	return erra == nil && errb == nil && json.Unmarshal(pa, &va) == nil && json.Unmarshal(pb, &vb) == nil && reflect.DeepEqual(va, vb)
}

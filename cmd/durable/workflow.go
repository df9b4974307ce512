package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// statuses are the run statuses the durable_runs CHECK constraint allows.
var statuses = []string{"running", "completed", "failed", "canceled", "terminated", "continued_as_new"}

func (a *app) workflowCommand() *cobra.Command {
	cmd := groupCommand("workflow", "List and inspect workflow runs",
		`workflow lists workflow runs and shows one run's state and history.

A workflow ID is the ID given at start (engine.StartOptions.ID); it names one
open run at a time, and a new run once the last one closed. Commands that take
a workflow ID show its newest run, or the run that --run names.`)
	cmd.AddCommand(a.workflowListCommand(), a.workflowDescribeCommand(), a.workflowHistoryCommand())
	return cmd
}

func (a *app) workflowListCommand() *cobra.Command {
	var (
		in    store.ListRunsParams
		since string
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List workflow runs, newest first",
		Long: `list prints a table of workflow runs, newest first: workflow ID, run ID,
type, status, when the run was created and when it closed. Filters combine.

--since takes an RFC 3339 time (2024-05-01T00:00:00Z), a date (2024-05-01,
local time) or a duration back from now (90m, 24h, 7d).`,
		Example: `  durable workflow list --status failed --since 24h
  durable workflow list --type Onboard --limit 10 --json
  durable workflow list --id onboard:ada@example.com`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if in.Status != "" && !slices.Contains(statuses, in.Status) {
				return usageError("--status %q: want one of %s", in.Status, strings.Join(statuses, ", "))
			}
			if in.Limit < 1 {
				return usageError("--limit must be at least 1, got %d", in.Limit)
			}
			if since != "" {
				t, err := parseSince(since, time.Now())
				if err != nil {
					return err
				}
				in.Since = t
			}
			s, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			runs, err := s.ListRuns(cmd.Context(), in)
			if err != nil {
				return err
			}
			if a.json {
				if runs == nil {
					runs = []store.RunSummary{}
				}
				return writeJSON(cmd.OutOrStdout(), runs)
			}
			if len(runs) == 0 {
				_, err := fmt.Fprintln(cmd.OutOrStdout(), "no runs found")
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKFLOW ID\tRUN ID\tTYPE\tSTATUS\tCREATED\tCLOSED")
			for _, r := range runs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(r.WorkflowID), r.RunID, clean(r.WorkflowType),
					r.Status, formatTime(r.CreatedAt), formatOptTime(r.ClosedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(runs) == in.Limit {
				fmt.Fprintf(a.stderr, "durable: showing the newest %d runs; --limit shows more, --since and --status fewer\n", in.Limit)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&in.Status, "status", "", "only runs with this status: "+strings.Join(statuses, ", "))
	f.StringVar(&in.WorkflowType, "type", "", "only runs of this workflow type")
	f.StringVar(&in.WorkflowID, "id", "", "only runs of this workflow ID")
	f.StringVar(&since, "since", "", "only runs created since this time or this long ago (RFC 3339, 2024-05-01, 24h, 7d)")
	f.IntVar(&in.Limit, "limit", 50, "the most runs to list")
	_ = cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(statuses, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// parseSince parses --since: an RFC 3339 time, a date, or a duration back
// from now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		return t, nil
	}
	if t, err := time.ParseInLocation(time.DateOnly, s, time.Local); err == nil {
		return t, nil
	}
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n >= 0 && n <= maxDays {
			return now.AddDate(0, 0, -n), nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d >= 0 {
		return now.Add(-d), nil
	}
	return time.Time{}, usageError("--since %q: want an RFC 3339 time (2024-05-01T00:00:00Z), a date (2024-05-01) or a duration (90m, 24h, 7d)", s)
}

// runFlags are the flags of the commands that show one run.
type runFlags struct {
	runID    string
	payloads bool
}

func (f *runFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.runID, "run", "", "the run to show (default: the workflow's newest run)")
	cmd.Flags().BoolVar(&f.payloads, "payloads", false, "include inputs and results, which may hold personal data")
}

// findRun returns the run of workflowID that runID names, or the newest.
func findRun(ctx context.Context, s store.Store, workflowID, runID string) (store.Run, error) {
	if runID == "" {
		r, err := s.GetRunByWorkflowID(ctx, workflowID)
		if errors.Is(err, store.ErrNotFound) {
			return r, notFound("no workflow with ID %q: find workflow IDs with 'durable workflow list'", workflowID)
		}
		return r, err
	}
	hint := fmt.Sprintf("list its runs with 'durable workflow list --id %q'", workflowID)
	if _, err := uuid.Parse(runID); err != nil {
		return store.Run{}, notFound("run ID %q is not a UUID: %s", runID, hint)
	}
	r, err := s.GetRun(ctx, runID)
	if errors.Is(err, store.ErrNotFound) || (err == nil && r.WorkflowID != workflowID) {
		return store.Run{}, notFound("workflow %q has no run %s: %s", workflowID, runID, hint)
	}
	return r, err
}

// describeOutput is the --json form of describe.
type describeOutput struct {
	WorkflowID        string                  `json:"workflow_id"`
	RunID             string                  `json:"run_id"`
	WorkflowType      string                  `json:"workflow_type"`
	Queue             string                  `json:"queue"`
	Status            string                  `json:"status"`
	CreatedAt         time.Time               `json:"created_at"`
	UpdatedAt         time.Time               `json:"updated_at"`
	ClosedAt          *time.Time              `json:"closed_at"`
	LastEventID       int64                   `json:"last_event_id"`
	Failure           *history.Failure        `json:"failure,omitempty"`
	TaskError         string                  `json:"task_error,omitempty"`
	TaskAttempts      int                     `json:"task_attempts,omitempty"`
	StartAt           *time.Time              `json:"start_at,omitempty"` // a delayed start's, until its code runs
	PendingActivities []store.PendingActivity `json:"pending_activities"`
	PendingTimers     []store.PendingTimer    `json:"pending_timers"`
	// Input and Result are payloads: set only with --payloads.
	Input  json.RawMessage `json:"input,omitempty"`
	Result json.RawMessage `json:"result,omitempty"`
}

func (a *app) workflowDescribeCommand() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "describe WORKFLOW_ID",
		Short: "Show a workflow run's state, pending activities and timers",
		Long: `describe shows the state of a workflow's newest run (or the run --run names):
status, type, queue, times (with "Start at" for a delayed start whose code
has not run yet), the last event ID, the failure of a failed run,
the error of a failing workflow task (a panic, non-determinism, a type no
worker has) and how often it failed; then the run's pending activities
(attempts so far, last error, when the next attempt may start) and pending
timers (when they fire).

Inputs, results and activity heartbeat details are payloads and may hold
personal data: they are printed only with --payloads.`,
		Example: `  durable workflow describe onboard:ada@example.com
  durable workflow describe onboard:ada@example.com --run 0b4f... --payloads --json`,
		Args: exactArgs(1, "one workflow ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := a.store(ctx)
			if err != nil {
				return err
			}
			r, err := findRun(ctx, s, args[0], rf.runID)
			if err != nil {
				return err
			}
			acts, err := s.ListPendingActivities(ctx, r.RunID)
			if err != nil {
				return err
			}
			timers, err := s.ListPendingTimers(ctx, r.RunID)
			if err != nil {
				return err
			}
			out := describeOutput{
				WorkflowID: r.WorkflowID, RunID: r.RunID, WorkflowType: r.WorkflowType, Queue: r.Queue,
				Status: r.Status, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt, ClosedAt: r.ClosedAt,
				LastEventID: r.LastEventID, Failure: r.Failure, TaskError: r.TaskError,
				PendingActivities: append([]store.PendingActivity{}, acts...),
				PendingTimers:     append([]store.PendingTimer{}, timers...),
			}
			if r.TaskError != "" {
				out.TaskAttempts = r.TaskAttempts
			}
			if r.FirstTaskAt != nil && r.FirstTaskAt.After(r.CreatedAt) {
				out.StartAt = r.FirstTaskAt
			}
			if rf.payloads {
				out.Input, out.Result = r.Input, r.Result
			} else {
				for i := range out.PendingActivities {
					// Heartbeat details are the activity's own payload.
					out.PendingActivities[i].Input = nil
					out.PendingActivities[i].Heartbeat = nil
				}
			}
			if a.json {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printDescribe(cmd.OutOrStdout(), out, rf.payloads, time.Now())
		}),
	}
	rf.register(cmd)
	return cmd
}

func printDescribe(w io.Writer, d describeOutput, payloads bool, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("Workflow ID", clean(d.WorkflowID))
	row("Run ID", d.RunID)
	row("Type", clean(d.WorkflowType))
	row("Queue", clean(d.Queue))
	row("Status", d.Status)
	row("Created", formatTime(d.CreatedAt))
	if d.StartAt != nil {
		row("Start at", formatTime(*d.StartAt)+" ("+relative(*d.StartAt, now)+"; delayed start: its code has not run)")
	}
	row("Updated", formatTime(d.UpdatedAt))
	row("Closed", formatOptTime(d.ClosedAt))
	row("Last event ID", strconv.FormatInt(d.LastEventID, 10))
	if d.Failure != nil {
		f := clean(d.Failure.Message)
		if d.Failure.Class != "" {
			f += " (" + clean(d.Failure.Class) + ")"
		}
		row("Failure", f)
	}
	if payloads {
		row("Input", payload(d.Input))
		row("Result", payload(d.Result))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if d.TaskError != "" {
		fmt.Fprintf(w, "\nWorkflow task failing (%d failed attempt(s)); the run waits until it is fixed:\n  %s\n",
			d.TaskAttempts, cleanLines(d.TaskError, "  "))
	}

	fmt.Fprintf(w, "\nPending activities: %d\n", len(d.PendingActivities))
	if len(d.PendingActivities) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEQ\tACTIVITY\tQUEUE\tATTEMPTS\tSTATE\tNEXT RUN AFTER\tLAST ERROR")
		for _, act := range d.PendingActivities {
			attempts := strconv.Itoa(act.Attempts)
			if act.MaxAttempts > 0 {
				attempts += " of " + strconv.Itoa(act.MaxAttempts)
			}
			state, next := activityState(act, now)
			lastErr := "-"
			if act.LastError != "" {
				lastErr = truncate(clean(act.LastError), 100)
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\n", act.Seq, clean(act.Activity), clean(act.Queue),
				attempts, state, next, lastErr)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if payloads {
			for _, act := range d.PendingActivities {
				fmt.Fprintf(w, "  input of seq %d: %s\n", act.Seq, payload(act.Input))
			}
		}
	}

	fmt.Fprintf(w, "\nPending timers: %d\n", len(d.PendingTimers))
	if len(d.PendingTimers) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  SEQ\tFIRE AT")
		for _, t := range d.PendingTimers {
			fmt.Fprintf(tw, "  %d\t%s (%s)\n", t.Seq, formatTime(t.FireAt), relative(t.FireAt, now))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	return nil
}

// activityState says what a pending activity is doing, and when it next
// may run (or when its running attempt's lease ends).
func activityState(act store.PendingActivity, now time.Time) (state, next string) {
	at := func(t time.Time) string { return formatTime(t) + " (" + relative(t, now) + ")" }
	switch {
	case act.LockedBy != "" && act.LockedUntil != nil && act.LockedUntil.After(now):
		return "running on " + clean(act.LockedBy), "lease ends " + at(*act.LockedUntil)
	case act.RunAfter.After(now) && act.Attempts > 0:
		return "waiting to retry", at(act.RunAfter)
	case act.RunAfter.After(now):
		return "scheduled", at(act.RunAfter)
	}
	return "ready, waiting for a worker", at(act.RunAfter)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

// payload prints a JSON payload compactly.
func payload(b json.RawMessage) string {
	if len(b) == 0 {
		return "-"
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return clean(string(b))
	}
	return buf.String()
}

func (a *app) workflowHistoryCommand() *cobra.Command {
	var rf runFlags
	cmd := &cobra.Command{
		Use:   "history WORKFLOW_ID",
		Short: "Print a workflow run's event history",
		Long: `history prints the events of a workflow's newest run (or the run --run names),
one line each: event ID, time, type and a short summary.

With --json it prints the events as a JSON array, each as history.Event
encodes itself ({"id", "time", "type", "attributes"}). Payloads (workflow and
activity inputs and results, side-effect values) are null unless --payloads is
given; with it, the output is the run's complete history.`,
		Example: `  durable workflow history onboard:ada@example.com
  durable workflow history onboard:ada@example.com --json --payloads > run.json`,
		Args: exactArgs(1, "one workflow ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			s, err := a.store(ctx)
			if err != nil {
				return err
			}
			r, err := findRun(ctx, s, args[0], rf.runID)
			if err != nil {
				return err
			}
			events, err := s.ListEvents(ctx, r.RunID, 0)
			if err != nil {
				return err
			}
			if a.json {
				out := make([]history.Event, len(events))
				for i, e := range events {
					if !rf.payloads {
						e.Attributes = redact(e.Attributes)
					}
					out[i] = e
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTIME\tTYPE\tSUMMARY")
			for _, e := range events {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", e.ID, formatTimeMillis(e.Time), e.Type(), summarize(e.Attributes, rf.payloads))
			}
			return tw.Flush()
		}),
	}
	rf.register(cmd)
	return cmd
}

// redact returns a without its payloads. An event type added to history
// with a payload must be added here (and to summarize).
func redact(a history.Attributes) history.Attributes {
	switch e := a.(type) {
	case history.WorkflowStarted:
		e.Input = nil
		return e
	case history.WorkflowCompleted:
		e.Result = nil
		return e
	case history.ActivityScheduled:
		e.Input = nil
		return e
	case history.ActivityCompleted:
		e.Result = nil
		return e
	case history.SideEffectRecorded:
		e.Value = nil
		return e
	case history.SignalReceived:
		e.Payload = nil
		return e
	case history.WorkflowContinuedAsNew:
		e.Input = nil
		return e
	case history.ChildWorkflowScheduled:
		e.Input = nil
		return e
	case history.ChildWorkflowCompleted:
		e.Result = nil
		return e
	case history.ExternalSignalScheduled:
		e.Payload = nil
		return e
	}
	return a
}

// summarize describes an event in one line, with its payload only if asked.
func summarize(a history.Attributes, payloads bool) string {
	var (
		s string
		p json.RawMessage
	)
	failure := func(f history.Failure) string {
		s := clean(f.Message)
		if f.Class != "" {
			s += " (" + clean(f.Class) + ")"
		}
		if f.Attempts > 0 {
			s += fmt.Sprintf(" after %d attempt(s)", f.Attempts)
		}
		return s
	}
	switch e := a.(type) {
	case history.WorkflowStarted:
		s = fmt.Sprintf("%s on queue %s", clean(e.WorkflowType), clean(e.Queue))
		if e.Attempt > 1 {
			s += fmt.Sprintf(", attempt %d", e.Attempt)
		}
		p = e.Input
	case history.WorkflowCompleted:
		p = e.Result
	case history.WorkflowFailed:
		s = failure(e.Failure)
	case history.ActivityScheduled:
		s = fmt.Sprintf("seq %d: %s on queue %s", e.Seq, clean(e.Activity), clean(e.Queue))
		p = e.Input
	case history.ActivityCompleted:
		s = fmt.Sprintf("seq %d, attempt %d", e.Seq, e.Attempt)
		p = e.Result
	case history.ActivityFailed:
		s = fmt.Sprintf("seq %d: %s", e.Seq, failure(e.Failure))
	case history.TimerStarted:
		s = fmt.Sprintf("seq %d, fires at %s", e.Seq, formatTime(e.FireAt))
	case history.TimerFired:
		s = fmt.Sprintf("seq %d", e.Seq)
	case history.TimerCanceled:
		s = fmt.Sprintf("seq %d", e.Seq)
	case history.SideEffectRecorded:
		s = fmt.Sprintf("seq %d", e.Seq)
		p = e.Value
	case history.SignalReceived:
		s = clean(e.Name)
		p = e.Payload
	case history.WorkflowCancelRequested:
		s = clean(e.Reason)
	case history.WorkflowCanceled:
		s = clean(e.Reason)
	case history.WorkflowTerminated:
		s = clean(e.Reason)
	case history.ActivityCanceled:
		s = fmt.Sprintf("seq %d", e.Seq)
	case history.VersionMarker:
		s = fmt.Sprintf("%s = %d", clean(e.ChangeID), e.Version)
	case history.WorkflowContinuedAsNew:
		s = "as run " + clean(e.NewRunID)
		p = e.Input
	case history.ChildWorkflowScheduled:
		s = fmt.Sprintf("seq %d: %s %s on queue %s", e.Seq, clean(e.WorkflowType), clean(e.WorkflowID), clean(e.Queue))
		p = e.Input
	case history.ChildWorkflowCompleted:
		s = fmt.Sprintf("seq %d", e.Seq)
		p = e.Result
	case history.ChildWorkflowFailed:
		s = fmt.Sprintf("seq %d: %s", e.Seq, failure(e.Failure))
	case history.ChildWorkflowStarted:
		s = fmt.Sprintf("seq %d: run %s", e.Seq, clean(e.RunID))
	case history.ExternalSignalScheduled:
		s = fmt.Sprintf("seq %d: %s to %s", e.Seq, clean(e.Name), clean(e.WorkflowID))
		if e.RunID != "" {
			s += " run " + clean(e.RunID)
		}
		p = e.Payload
	case history.ExternalCancelScheduled:
		s = fmt.Sprintf("seq %d: %s: %s", e.Seq, clean(e.WorkflowID), clean(e.Reason))
	case history.ExternalRequestCompleted:
		s = fmt.Sprintf("seq %d", e.Seq)
	case history.ExternalRequestFailed:
		s = fmt.Sprintf("seq %d: %s", e.Seq, failure(e.Failure))
	}
	if payloads && p != nil {
		if s != "" {
			s += ": "
		}
		s += payload(p)
	}
	return s
}

package main

import (
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

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/store"
)

// deadKinds are the dead-letter kinds the durable_dead_letters CHECK
// constraint allows.
var deadKinds = []string{store.DeadJob, store.DeadWorkflow}

func (a *app) dlqCommand() *cobra.Command {
	cmd := groupCommand("dlq", "List, inspect and redrive dead letters",
		`dlq lists and shows dead letters and redrives them once the fix has shipped.

A dead letter is a standalone job (engine.Enqueue) that failed for good, its
retries spent or its error permanent, or a workflow run that failed. Each has
a numeric ID. Redriving a job queues it again with a fresh attempt budget.
Redriving a workflow continues it in a new run of the same workflow ID whose
history is the failed run's up to its last failed activity: that activity
runs again, the activities that completed do not. Workers pick the redriven
work up; this command only queues it.`)
	cmd.AddCommand(a.dlqListCommand(), a.dlqShowCommand(), a.dlqRedriveCommand())
	return cmd
}

// checkKind returns a usage error unless kind is empty or a dead-letter kind.
func checkKind(kind string) error {
	if kind != "" && !slices.Contains(deadKinds, kind) {
		return usageError("--kind %q: want one of %s", kind, strings.Join(deadKinds, ", "))
	}
	return nil
}

// deadLetterOutput is the --json form of a dead letter.
type deadLetterOutput struct {
	ID    int64  `json:"id"`
	Kind  string `json:"kind"`
	Type  string `json:"type"`
	Queue string `json:"queue"`
	// IdempotencyKey is a job's key.
	IdempotencyKey string `json:"idempotency_key,omitempty"`
	// WorkflowID and RunID name a workflow's failed run.
	WorkflowID string `json:"workflow_id,omitempty"`
	RunID      string `json:"run_id,omitempty"`
	Attempts   int    `json:"attempts"`
	ErrorClass string `json:"error_class,omitempty"`
	LastError  string `json:"last_error"`
	// Options are a job's activity options: timeouts and retry policy.
	Options        json.RawMessage `json:"options,omitempty"`
	FirstFailedAt  time.Time       `json:"first_failed_at"`
	DeadLetteredAt time.Time       `json:"dead_lettered_at"`
	RedrivenAt     *time.Time      `json:"redriven_at"`
	// RedriveRunID is the run a redriven workflow continues in.
	RedriveRunID string `json:"redrive_run_id,omitempty"`
	// Payload is the job's or workflow's input: set only with --payloads.
	Payload json.RawMessage `json:"payload,omitempty"`
}

func deadLetterOut(d store.DeadLetter, payloads bool) deadLetterOutput {
	out := deadLetterOutput{
		ID: d.ID, Kind: d.Kind, Type: d.Type, Queue: d.Queue, IdempotencyKey: d.IdempotencyKey,
		WorkflowID: d.WorkflowID, RunID: d.RunID, Attempts: d.Attempts, ErrorClass: d.ErrorClass,
		LastError: d.LastError, Options: d.Options, FirstFailedAt: d.FirstFailedAt,
		DeadLetteredAt: d.DeadLetteredAt, RedrivenAt: d.RedrivenAt, RedriveRunID: d.RedriveRunID,
	}
	if payloads {
		out.Payload = d.Payload
	}
	return out
}

func (a *app) dlqListCommand() *cobra.Command {
	var (
		f   store.DeadLetterFilter
		all bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List dead letters not yet redriven, newest first",
		Long: `list prints a table of the dead letters not yet redriven (with --all, also
those that were), newest first: ID, kind (job or workflow), type (the job's
activity or the workflow's type), attempts, error class, the last error (its
first line, truncated; 'durable dlq show ID' prints all of it), when it first
failed, when it was dead-lettered and when it was redriven. Filters combine.`,
		Example: `  durable dlq list
  durable dlq list --kind job --type SendEmail --all --json`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if err := checkKind(f.Kind); err != nil {
				return err
			}
			if f.Limit < 1 {
				return usageError("--limit must be at least 1, got %d", f.Limit)
			}
			f.Pending = !all
			s, err := a.store(cmd.Context())
			if err != nil {
				return err
			}
			ds, err := s.ListDeadLetters(cmd.Context(), f)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if a.json {
				out := make([]deadLetterOutput, len(ds))
				for i, d := range ds {
					out[i] = deadLetterOut(d, false)
				}
				return writeJSON(w, out)
			}
			if len(ds) == 0 {
				msg := "no dead letters waiting to be redriven"
				if all {
					msg = "no dead letters found"
				}
				_, err := fmt.Fprintln(w, msg)
				return err
			}
			tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tKIND\tTYPE\tATTEMPTS\tERROR CLASS\tLAST ERROR\tFIRST FAILED\tDEAD-LETTERED\tREDRIVEN")
			for _, d := range ds {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Kind, clean(d.Type), d.Attempts,
					orDash(clean(d.ErrorClass), d.ErrorClass), orDash(firstLine(d.LastError, 80), d.LastError),
					formatTime(d.FirstFailedAt), formatTime(d.DeadLetteredAt), formatOptTime(d.RedrivenAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			if len(ds) == f.Limit {
				fmt.Fprintf(a.stderr, "durable: showing the newest %d dead letters; --limit shows more, --kind and --type fewer\n", f.Limit)
			}
			return nil
		}),
	}
	fl := cmd.Flags()
	fl.StringVar(&f.Kind, "kind", "", "only dead letters of this kind: "+strings.Join(deadKinds, ", "))
	fl.StringVar(&f.Type, "type", "", "only dead letters of this job activity or workflow type")
	fl.BoolVar(&all, "all", false, "include dead letters already redriven")
	fl.IntVar(&f.Limit, "limit", 50, "the most dead letters to list")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(deadKinds, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// orDash returns s, or "-" if raw is empty.
func orDash(s, raw string) string {
	if raw == "" {
		return "-"
	}
	return s
}

// firstLine is the first line of s, made safe to print and cut to n runes;
// it ends in "…" if anything was left out.
func firstLine(s string, n int) string {
	line, rest, _ := strings.Cut(strings.TrimSpace(s), "\n")
	line = clean(strings.TrimSpace(line))
	if strings.TrimSpace(rest) != "" {
		line += " …"
	}
	return truncate(line, n)
}

// parseDeadLetterID parses a dead-letter ID argument.
func parseDeadLetterID(arg string) (int64, error) {
	id, err := strconv.ParseInt(arg, 10, 64)
	if err != nil || id < 1 {
		return 0, notFound("dead-letter ID %q is not a positive number: find IDs with 'durable dlq list'", arg)
	}
	return id, nil
}

// getDeadLetter returns dead letter id, or an error with exit code 3.
func getDeadLetter(ctx context.Context, s store.Store, id int64) (store.DeadLetter, error) {
	d, err := s.GetDeadLetter(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return d, notFound("no dead letter with ID %d: find IDs with 'durable dlq list --all'", id)
	}
	return d, err
}

func (a *app) dlqShowCommand() *cobra.Command {
	var payloads bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Show every field of a dead letter",
		Long: `show prints every field of one dead letter: kind, type, queue, the job's
idempotency key and options or the workflow's ID and failed run, attempts,
error class, when it first failed, was dead-lettered and was redriven (and
the run a redriven workflow continues in), then the whole last error.

The payload (the job's or workflow's input) may hold personal data: it is
printed only with --payloads.`,
		Example: `  durable dlq show 42
  durable dlq show 42 --payloads --json`,
		Args: exactArgs(1, "one dead-letter ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, err := parseDeadLetterID(args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			s, err := a.store(ctx)
			if err != nil {
				return err
			}
			d, err := getDeadLetter(ctx, s, id)
			if err != nil {
				return err
			}
			if a.json {
				return writeJSON(cmd.OutOrStdout(), deadLetterOut(d, payloads))
			}
			return printDeadLetter(cmd.OutOrStdout(), d, payloads)
		}),
	}
	cmd.Flags().BoolVar(&payloads, "payloads", false, "include the payload, which may hold personal data")
	return cmd
}

func printDeadLetter(w io.Writer, d store.DeadLetter, payloads bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("ID", strconv.FormatInt(d.ID, 10))
	row("Kind", d.Kind)
	row("Type", clean(d.Type))
	row("Queue", clean(d.Queue))
	if d.Kind == store.DeadWorkflow {
		row("Workflow ID", clean(d.WorkflowID))
		row("Failed run ID", orDash(d.RunID, d.RunID))
	} else {
		row("Idempotency key", orDash(clean(d.IdempotencyKey), d.IdempotencyKey))
	}
	row("Attempts", strconv.Itoa(d.Attempts))
	row("Error class", orDash(clean(d.ErrorClass), d.ErrorClass))
	row("First failed", formatTime(d.FirstFailedAt))
	row("Dead-lettered", formatTime(d.DeadLetteredAt))
	row("Redriven", formatOptTime(d.RedrivenAt))
	if d.RedriveRunID != "" {
		row("Redrive run ID", d.RedriveRunID)
	}
	if d.Kind == store.DeadJob {
		row("Options", payload(d.Options))
	}
	if payloads {
		row("Payload", payload(d.Payload))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "\nLast error:\n  %s\n", cleanLines(d.LastError, "  "))
	if d.RedrivenAt == nil {
		fmt.Fprintf(w, "\nRedrive it once the fix has shipped: durable dlq redrive %d\n", d.ID)
	}
	return nil
}

// redriveOutput is what redrive did with one dead letter.
type redriveOutput struct {
	ID         int64  `json:"id"`
	Kind       string `json:"kind"`
	Type       string `json:"type"`
	WorkflowID string `json:"workflow_id,omitempty"`
	// Redriven is false when the dead letter had been redriven before, or
	// cannot be redriven now (then NotRedriven says why).
	Redriven   bool       `json:"redriven"`
	RedrivenAt *time.Time `json:"redriven_at"`
	// RunID is the run a redriven workflow continues in.
	RunID string `json:"run_id,omitempty"`
	// NotRedriven says why the dead letter cannot be redriven now and what
	// to do; it stays pending.
	NotRedriven string `json:"not_redriven,omitempty"`
}

func (a *app) dlqRedriveCommand() *cobra.Command {
	var (
		all  bool
		kind string
		typ  string
	)
	cmd := &cobra.Command{
		Use:   "redrive [ID...]",
		Short: "Run dead letters again, by ID or all at once, after the fix has shipped",
		Long: `redrive runs the dead letters it is given again, or with --all every dead
letter not yet redriven (of --kind and --type, if given), oldest first, and
prints what it did with each. A job is queued again with a fresh attempt
budget. A workflow continues in a new run of the same workflow ID, from its
last failed activity; redrive prints the new run's ID. Workers pick the work
up; no worker needs to run for the command itself.

Redriving twice is harmless: a dead letter redriven before is reported as
such and left alone. A dead letter cannot be redriven while what it would
queue is held: a job whose idempotency key a pending job holds (let that job
finish), or a workflow whose ID has an open run (finish or terminate it).
redrive reports each such one as not redriven, leaves it pending, goes on
with the others, and exits 1. Any other error stops it; what it did before
stays done, so running it again is safe.

It checks every ID before it redrives any: an unknown ID exits 3 with
nothing done.`,
		Example: `  durable dlq redrive 42 43
  durable dlq redrive --all --kind job --type SendEmail
  durable dlq redrive --all --json`,
		RunE: action(func(cmd *cobra.Command, args []string) error {
			switch {
			case all && len(args) > 0:
				return usageError("give dead-letter IDs or --all, not both")
			case !all && len(args) == 0:
				return usageError("%s takes dead-letter IDs, or --all to redrive every one not yet redriven", cmd.CommandPath())
			case !all && (kind != "" || typ != ""):
				return usageError("--kind and --type select what --all redrives: add --all, or leave them out")
			}
			if err := checkKind(kind); err != nil {
				return err
			}
			ids := make([]int64, len(args))
			for i, arg := range args {
				id, err := parseDeadLetterID(arg)
				if err != nil {
					return err
				}
				ids[i] = id
			}

			ctx := cmd.Context()
			s, err := a.store(ctx)
			if err != nil {
				return err
			}
			if all {
				if ids, err = s.ListPendingDeadLetterIDs(ctx, kind, typ); err != nil {
					return err
				}
			} else {
				for _, id := range ids {
					if _, err := getDeadLetter(ctx, s, id); err != nil {
						return err
					}
				}
			}
			e, err := a.clientEngine(ctx)
			if err != nil {
				return err
			}

			w := cmd.OutOrStdout()
			done := []redriveOutput{}
			var held []string
			err = func() error {
				for _, id := range ids {
					out, err := redrive(ctx, e, s, id)
					if err != nil {
						return err
					}
					done = append(done, out)
					if out.NotRedriven != "" {
						held = append(held, strconv.FormatInt(id, 10))
					}
					if !a.json {
						printRedrive(w, out)
					}
				}
				if len(held) > 0 {
					return fmt.Errorf("%d dead letter(s) not redriven, left pending: %s: redrive again once what holds them has finished",
						len(held), strings.Join(held, ", "))
				}
				return nil
			}()
			if a.json {
				// What was done before an error is on stdout all the same.
				if jerr := writeJSON(w, done); err == nil {
					err = jerr
				}
			} else if (err == nil || len(held) > 0) && all {
				n := 0
				for _, o := range done {
					if o.Redriven {
						n++
					}
				}
				if len(ids) == 0 {
					fmt.Fprintln(w, "no dead letters waiting to be redriven")
				} else {
					fmt.Fprintf(w, "redrove %d dead letter(s)\n", n)
				}
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&all, "all", false, "redrive every dead letter not yet redriven (of --kind and --type)")
	f.StringVar(&kind, "kind", "", "with --all, only dead letters of this kind: "+strings.Join(deadKinds, ", "))
	f.StringVar(&typ, "type", "", "with --all, only dead letters of this job activity or workflow type")
	_ = cmd.RegisterFlagCompletionFunc("kind", cobra.FixedCompletions(deadKinds, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// redrive redrives dead letter id through the engine and reports the
// outcome as the database has it.
func redrive(ctx context.Context, e *engine.Engine, s store.Store, id int64) (redriveOutput, error) {
	res, err := e.Redrive(ctx, id)
	var held string
	switch {
	case errors.Is(err, engine.ErrDeadLetterNotFound):
		return redriveOutput{}, notFound("no dead letter with ID %d: find IDs with 'durable dlq list --all'", id)
	case errors.Is(err, engine.ErrRedriveConflict):
		// The error names the dead letter, which the output does already.
		held = strings.TrimPrefix(err.Error(), fmt.Sprintf("redrive dead letter %d: %v: ", id, engine.ErrRedriveConflict))
	case err != nil:
		return redriveOutput{}, err
	}
	d, err := s.GetDeadLetter(ctx, id)
	if err != nil {
		return redriveOutput{}, fmt.Errorf("read dead letter %d after its redrive: %w", id, err)
	}
	if held != "" && d.Kind == store.DeadWorkflow {
		held += fmt.Sprintf(" (see 'durable workflow describe %q')", d.WorkflowID)
	}
	return redriveOutput{
		ID: d.ID, Kind: d.Kind, Type: d.Type, WorkflowID: d.WorkflowID,
		Redriven: res.Redriven, RedrivenAt: d.RedrivenAt, RunID: d.RedriveRunID, NotRedriven: held,
	}, nil
}

func printRedrive(w io.Writer, o redriveOutput) {
	what := fmt.Sprintf("dead letter %d (%s %s", o.ID, o.Kind, clean(o.Type))
	if o.WorkflowID != "" {
		what += ", workflow ID " + clean(o.WorkflowID)
	}
	what += ")"
	switch {
	case o.NotRedriven != "":
		fmt.Fprintf(w, "%s: not redriven: %s\n", what, o.NotRedriven)
	case !o.Redriven:
		fmt.Fprintf(w, "%s: already redriven at %s", what, formatOptTime(o.RedrivenAt))
		if o.RunID != "" {
			fmt.Fprintf(w, ", as run %s", o.RunID)
		}
		fmt.Fprintln(w, "; nothing done")
	case o.Kind == store.DeadWorkflow:
		fmt.Fprintf(w, "%s: redriven: continues in run %s\n", what, o.RunID)
	default:
		fmt.Fprintf(w, "%s: redriven: queued again with a fresh attempt budget\n", what)
	}
}

// Package durablecli is the replay debugger and the pre-deploy replay gate,
// as commands to mount in your own program.
//
// Replaying needs your workflow code, so these commands cannot live in the
// durable binary: mount them in a program that registers your workflows.
// With cobra, add the command to your root:
//
//	root.AddCommand(durablecli.Command(myapp.Register))
//
// Without cobra, in main:
//
//	if len(os.Args) > 1 && os.Args[1] == "replay" {
//		os.Exit(durablecli.Run(ctx, os.Args[2:], os.Stdout, os.Stderr, myapp.Register))
//	}
//
// Then:
//
//	myapp replay trace onboard:ada@example.com            # from the database
//	myapp replay trace --file history.json --until 12     # from an exported history
//	myapp replay check --since 24h                        # the gate: exit 1 on divergence
//
// trace prints the run step by step: each event delivered to the workflow,
// each recorded command matched with the line of code that made it, and the
// workflow's own log lines as replay reaches them; with --until it stops at an
// event and prints what the run waits for there. check replays every open run
// (or those of a type, or started since a time) against this build and fails
// on any divergence, with the replayer's report.
//
// A program whose engines encrypt payloads (engine.Options.Codec) passes the
// same codec with WithCodec.
package durablecli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/history"
)

// Option configures the replay commands.
type Option func(*engine.Options)

// WithCodec decodes payloads stored or exported encoded by c (the codec the
// program's engines run with, engine.Options.Codec), so that encrypted runs
// replay.
func WithCodec(c codec.PayloadCodec) Option {
	return func(o *engine.Options) { o.Codec = c }
}

// Command returns the "replay" command, with trace and check. register
// registers the program's workflows (and may register activities too) on
// an engine or a replayer: the function the program's own engines register
// with, if it takes an engine.Registrar.
func Command(register func(engine.Registrar) error, opts ...Option) *cobra.Command {
	eo := engine.Options{Logger: quiet()}
	for _, o := range opts {
		o(&eo)
	}
	var db string
	root := &cobra.Command{
		Use:   "replay",
		Short: "Replay workflow histories against this build's code",
		Long: "Replay workflow histories against this build's code: trace one run step by step,\n" +
			"or check every open run before a deploy.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.PersistentFlags().StringVar(&db, "db", defaultDB(), "PostgreSQL URL (default $DATABASE_URL)")

	var file string
	var until int64
	trace := &cobra.Command{
		Use:   "trace [WORKFLOW_ID]",
		Short: "Print a run's replay step by step",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (file == "") == (len(args) == 0) {
				return usageError{errors.New("give a workflow ID or --file, not both")}
			}
			ctx := cmd.Context()
			if file != "" {
				rp, err := replayer(eo, register)
				if err != nil {
					return err
				}
				f, err := os.Open(file)
				if err != nil {
					return err
				}
				defer f.Close()
				h, err := history.Import(f)
				if err != nil {
					return err
				}
				return printTrace(ctx, cmd.OutOrStdout(), rp, h, until)
			}
			e, closeDB, err := connected(ctx, db, eo, register)
			if err != nil {
				return err
			}
			defer closeDB()
			h, err := e.ExportHistory(ctx, args[0])
			if err != nil {
				return err
			}
			return printTrace(ctx, cmd.OutOrStdout(), e, h, until)
		},
	}
	trace.Flags().StringVar(&file, "file", "", "an exported history (durable workflow history ID --json --payloads)")
	trace.Flags().Int64Var(&until, "until", 0, "stop after this event and print what the run waits for")

	var typ, since string
	var limit int
	check := &cobra.Command{
		Use:   "check",
		Short: "Replay open runs against this build; exit 1 if any diverges",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			o := engine.CheckOptions{WorkflowType: typ, Limit: limit}
			if since != "" {
				d, err := time.ParseDuration(since)
				if err != nil {
					return usageError{fmt.Errorf("--since %q: want a duration such as 24h", since)}
				}
				o.Since = time.Now().Add(-d)
			}
			e, closeDB, err := connected(ctx, db, eo, register)
			if err != nil {
				return err
			}
			defer closeDB()
			n, err := e.CheckOpenRuns(ctx, o)
			var ce *engine.CheckError
			if errors.As(err, &ce) {
				for _, f := range ce.Failures {
					fmt.Fprintf(cmd.OutOrStdout(), "DIVERGES  %s (run %s)\n  %v\n", f.WorkflowID, f.RunID, f.Err)
				}
				return divergence{fmt.Errorf("%d of %d open runs do not replay against this build: do not deploy it", len(ce.Failures), ce.Checked)}
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "ok: %d open runs replay against this build\n", n)
			return nil
		},
	}
	check.Flags().StringVar(&typ, "type", "", "only runs of this workflow type")
	check.Flags().StringVar(&since, "since", "", "only runs started within this duration (e.g. 24h)")
	check.Flags().IntVar(&limit, "limit", 1000, "check at most this many runs, newest first")

	root.AddCommand(trace, check)
	return root
}

// Run runs the replay command with args and returns the exit code: 0 ok,
// 1 a divergence or an error, 2 a usage error.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer, register func(engine.Registrar) error, opts ...Option) int {
	cmd := Command(register, opts...)
	cmd.SetArgs(args)
	cmd.SetOut(stdout)
	cmd.SetErr(stderr)
	err := cmd.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "replay:", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown ") || strings.Contains(err.Error(), "accepts ") {
		return 2
	}
	return 1
}

// tracer is what replays a trace: an *engine.Replayer, or an
// *engine.Engine on the run's database.
type tracer interface {
	ReplayTrace(ctx context.Context, h history.History, until int64, fn func(engine.TraceStep)) ([]string, error)
}

func printTrace(ctx context.Context, w io.Writer, t tracer, h history.History, until int64) error {
	fmt.Fprintf(w, "run %s of %s (%s), %d events\n", h.RunID, h.WorkflowID, h.WorkflowType, len(h.Events))
	pending, err := t.ReplayTrace(ctx, h, until, func(s engine.TraceStep) {
		switch s.Kind {
		case engine.TraceEvent:
			fmt.Fprintf(w, "%5d  ->  %s\n", s.EventID, s.Text)
		case engine.TraceCommand:
			fmt.Fprintf(w, "%5d  <-  %s\n", s.EventID, s.Text)
		default:
			fmt.Fprintf(w, "       log %s\n", s.Text)
		}
	})
	if err != nil {
		fmt.Fprintf(w, "DIVERGES: %v\n", err)
		return divergence{err}
	}
	if until > 0 {
		fmt.Fprintf(w, "stopped after event %d; the run waits for:\n", until)
		if len(pending) == 0 {
			fmt.Fprintln(w, "  nothing")
		}
		for _, p := range pending {
			fmt.Fprintf(w, "  %s\n", p)
		}
	}
	return nil
}

type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

type divergence struct{ error }

func (d divergence) Unwrap() error { return d.error }

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

func replayer(o engine.Options, register func(engine.Registrar) error) (*engine.Replayer, error) {
	rp, err := engine.NewReplayer(engine.ReplayerOptions{
		Codec: o.Codec, Logger: o.Logger, WorkflowDeadlockTimeout: o.WorkflowDeadlockTimeout, MaxPayloadBytes: o.MaxPayloadBytes,
	})
	if err != nil {
		return nil, err
	}
	return rp, register(rp)
}

func connected(ctx context.Context, db string, o engine.Options, register func(engine.Registrar) error) (*engine.Engine, func(), error) {
	pool, err := pgxpool.New(ctx, db)
	if err != nil {
		return nil, nil, err
	}
	o.SkipMigrate = true
	e, err := engine.New(pool, o)
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	if err := register(e); err != nil {
		pool.Close()
		return nil, nil, err
	}
	return e, pool.Close, nil
}

func defaultDB() string {
	if u := os.Getenv("DATABASE_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres"
}

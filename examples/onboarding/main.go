// Command onboarding runs the seed article's onboarding workflow: charge the
// card, provision the account, send the welcome email, sleep a week
// (durably), check that setup was completed and nudge if not.
//
//	go run ./examples/onboarding -week 3s
//
// Its database is -db, else $DATABASE_URL, else the development SQLite file
// (engine.DevDatabase): nothing to install. Stop it with Ctrl-C while it
// sleeps and run it again with the same -email: the same run resumes, and
// no completed step runs again.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/durable-go/durable/durablecli"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/onboarding/onboard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	// `onboarding replay trace ID` and `onboarding replay check`: the replay
	// debugger and the pre-deploy gate, mounted in one line.
	if len(os.Args) > 1 && os.Args[1] == "replay" {
		os.Exit(durablecli.Run(ctx, os.Args[2:], os.Stdout, os.Stderr, onboard.Register))
	}
	if err := run(ctx, os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "onboarding:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("onboarding", flag.ContinueOnError)
	fs.SetOutput(out)
	db := fs.String("db", engine.DefaultDSN(), "database: a postgres:// URL, or a SQLite file path (default $DATABASE_URL, else "+engine.DevDatabase()+")")
	week := fs.Duration("week", 7*24*time.Hour, "how long a week lasts: the wait before the setup check")
	email := fs.String("email", "ada@example.com", "the customer's email; it names the workflow")
	completed := fs.Bool("completed", false, "whether the customer completes setup during the week")
	if err := fs.Parse(args); err != nil {
		return err
	}
	onboard.Configure(out, *completed)

	eng, err := engine.Open(ctx, *db, engine.Options{
		Logger:       slog.New(slog.NewTextHandler(io.Discard, nil)),
		PollInterval: time.Second,
	})
	if err != nil {
		return err
	}
	defer eng.Close()
	fmt.Fprintf(out, "database: %s\n", describeDB(*db))
	if err := onboard.Register(eng); err != nil {
		return err
	}
	runCtx, stopEngine := context.WithCancel(context.WithoutCancel(ctx))
	engineDone := make(chan error, 1)
	go func() { engineDone <- eng.Run(runCtx) }()
	defer func() {
		stopEngine()
		<-engineDone
	}()

	in := onboard.OnboardInput{Email: *email, PaymentMethod: "card_4242", Cents: 4900, SetupGrace: *week}
	r, err := engine.Start(ctx, eng, onboard.Onboard, in, engine.StartOptions{ID: "onboard:" + *email})
	if err != nil {
		return err
	}
	if r.Existing {
		fmt.Fprintf(out, "resuming workflow %s (run %s)\n", r.WorkflowID, r.RunID)
	} else {
		fmt.Fprintf(out, "started workflow %s (run %s)\n", r.WorkflowID, r.RunID)
	}

	// Wait for the result, saying what the run is doing now and then.
	resc := make(chan error, 1)
	var res onboard.OnboardResult
	go func() {
		var err error
		res, err = r.Result(ctx)
		resc <- err
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-resc:
			if errors.Is(err, context.Canceled) {
				fmt.Fprintf(out, "stopped; run again with -email %s to resume\n", *email)
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "done: account %s, payment %s, nudged %v\n", res.AccountID, res.PaymentID, res.Nudged)
			return nil
		case <-tick.C:
			if line := status(ctx, eng, r.WorkflowID); line != "" {
				fmt.Fprintln(out, line)
			}
		}
	}
}

// status describes a waiting run: the timer it sleeps on, if any.
func status(ctx context.Context, eng *engine.Engine, workflowID string) string {
	info, err := eng.Describe(ctx, workflowID)
	if err != nil || len(info.PendingTimers) == 0 {
		return ""
	}
	return fmt.Sprintf("  ... sleeping durably, %s left (a timer row in the database; Ctrl-C and run again to resume)",
		time.Until(info.PendingTimers[0].FireAt).Round(time.Second))
}

// describeDB names the database for the first line of output: a SQLite
// file's path, or a Postgres URL without its password.
func describeDB(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return "SQLite file " + strings.TrimPrefix(strings.TrimPrefix(dsn, "sqlite:"), "file:") + " (set -db or DATABASE_URL to a postgres:// URL for PostgreSQL)"
	}
	return "PostgreSQL " + u.Redacted()
}

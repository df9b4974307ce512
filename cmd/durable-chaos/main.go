// Command durable-chaos runs the reliability rig (internal/chaos) for as long
// and as hard as asked, and prints what it tried and what held: a table,
// then the same figures as one line of JSON.
//
// The long mode, for the published figures:
//
//	go run ./cmd/durable-chaos -workflows 10000 -duration 30m
//
// The short mode, as `go test ./internal/chaos` runs it:
//
//	go run ./cmd/durable-chaos -short
//
// It needs the PostgreSQL server binaries (initdb, postgres, pg_ctl) on the
// machine: the rig runs a private cluster that it stops and crashes, never
// a shared server. It exits 0 when nothing was lost, 1 when the checker
// found violations, and 2 when the rig itself could not run.
//
// The same program is the rig's worker: the rig re-executes it with the
// worker's configuration in the environment.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/durable-go/durable/internal/chaos"
)

func main() {
	if chaos.IsWorker() {
		os.Exit(chaos.WorkerMain())
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// longOptions are the long mode's defaults: every fault on, at rates a run
// of half an hour survives with work still getting done.
func longOptions() chaos.Options {
	return chaos.Options{
		Workflows: 10000, Duration: 30 * time.Minute, InFlight: 100, Workers: 3, Concurrency: 16, Lease: time.Second,
		KillEvery: 700 * time.Millisecond, KillAllEvery: 30 * time.Second, PauseEvery: 5 * time.Second,
		PGStopEvery: 20 * time.Second, PGStopMax: 2 * time.Second, ConnKillEvery: 3 * time.Second,
		DrainTimeout: 5 * time.Minute,
		SpinEvery:    time.Minute, UpgradeAt: 15 * time.Minute, WrongKeySignals: true,
		ClockSkews: []time.Duration{0, -5 * time.Second, time.Hour},
	}
}

// skewsFlag is a comma-separated list of durations, one per worker slot.
type skewsFlag struct{ d *[]time.Duration }

func (f skewsFlag) String() string {
	if f.d == nil {
		return ""
	}
	parts := make([]string, len(*f.d))
	for i, d := range *f.d {
		parts[i] = d.String()
	}
	return strings.Join(parts, ",")
}

func (f skewsFlag) Set(s string) error {
	var out []time.Duration
	if s != "" {
		for _, p := range strings.Split(s, ",") {
			d, err := time.ParseDuration(strings.TrimSpace(p))
			if err != nil {
				return err
			}
			out = append(out, d)
		}
	}
	*f.d = out
	return nil
}

// parseFlags returns the rig's options from the command line. -short
// changes the defaults of the other flags to the short mode's.
func parseFlags(args []string, stderr io.Writer) (chaos.Options, error) {
	def := longOptions()
	if slices.ContainsFunc(args, func(a string) bool {
		return slices.Contains([]string{"-short", "--short", "-short=true", "--short=true"}, a)
	}) {
		def = chaos.ShortOptions()
	}
	fs := flag.NewFlagSet("durable-chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: durable-chaos [flags]\n\nRuns workflows on worker processes while killing, pausing and disconnecting them\nand stopping PostgreSQL, then checks that nothing was lost.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.Bool("short", false, "use the short mode's sizes and fault rates as the defaults of the flags below")
	o := def
	fs.IntVar(&o.Workflows, "workflows", def.Workflows, "start at least this many workflows")
	fs.DurationVar(&o.Duration, "duration", def.Duration, "inject faults and start workflows for at least this long")
	fs.IntVar(&o.InFlight, "inflight", def.InFlight, "most workflows open at once")
	fs.IntVar(&o.Workers, "workers", def.Workers, "worker processes")
	fs.IntVar(&o.Concurrency, "concurrency", def.Concurrency, "each worker's workflow and activity concurrency")
	fs.DurationVar(&o.Lease, "lease", def.Lease, "workflow-task lease and activity timeouts")
	fs.DurationVar(&o.KillEvery, "kill-every", def.KillEvery, "mean time between SIGKILLs of one worker (0: never)")
	fs.DurationVar(&o.KillAllEvery, "kill-all-every", def.KillAllEvery, "mean time between SIGKILLs of all workers at once (0: never)")
	fs.DurationVar(&o.PauseEvery, "pause-every", def.PauseEvery, "mean time between SIGSTOPs of a worker past its lease (0: never)")
	fs.DurationVar(&o.PGStopEvery, "pg-stop-every", def.PGStopEvery, "mean time between PostgreSQL stops, fast and immediate in turn (0: never)")
	fs.DurationVar(&o.PGStopMax, "pg-stop-max", def.PGStopMax, "longest PostgreSQL stop")
	fs.DurationVar(&o.ConnKillEvery, "conn-kill-every", def.ConnKillEvery, "mean time between pg_terminate_backend rounds (0: never)")
	fs.DurationVar(&o.SpinEvery, "spin-every", def.SpinEvery, "mean time between runs of workflow code that never yields, terminated by the driver (0: none)")
	fs.DurationVar(&o.UpgradeAt, "upgrade-at", def.UpgradeAt, "when to upgrade every worker to the second generation of the workflow code (default: half the duration; 0: run it from the start)")
	fs.Var(skewsFlag{&o.ClockSkews}, "clock-skews", "clock skew of each worker slot, in slot order, comma-separated (e.g. 0,-5s,1h; empty: none)")
	fs.BoolVar(&o.WrongKeySignals, "wrong-key-signals", def.WrongKeySignals, "send some signals from an engine whose payload key is wrong")
	fs.DurationVar(&o.DeadlockTimeout, "deadlock-timeout", def.DeadlockTimeout, "the workers' workflow deadlock timeout (0: half the lease)")
	fs.DurationVar(&o.DrainTimeout, "drain-timeout", def.DrainTimeout, "how long open workflows may take once the faults stop")
	fs.Uint64Var(&o.Seed, "seed", 0, "seed of the workload and the fault choices (0: from the clock)")
	fs.StringVar(&o.Dir, "dir", "", "directory for the logs (default: a new temporary directory)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q (see -h)", fs.Args())
	}
	upgradeSet := false
	fs.Visit(func(f *flag.Flag) { upgradeSet = upgradeSet || f.Name == "upgrade-at" })
	if !upgradeSet {
		o.UpgradeAt = o.Duration / 2
	}
	return o, nil
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "durable-chaos: %v\n", err)
		return 2
	}
	o.Logf = func(format string, args ...any) { fmt.Fprintf(stderr, format+"\n", args...) }
	rep, err := chaos.Run(ctx, o)
	if err != nil {
		fmt.Fprintf(stderr, "durable-chaos: %v\n", err)
		return 2
	}
	fmt.Fprint(stdout, rep.Table())
	fmt.Fprintln(stdout, rep.JSON())
	if !rep.OK() {
		return 1
	}
	return 0
}

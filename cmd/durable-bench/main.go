// Command durable-bench is the load driver of the performance issue: it runs
// the workloads W1-W6 against a PostgreSQL server, or a SQLite file, and
// prints a table and one JSON line per workload. Each line names the store
// it ran on ("store").
//
// On PostgreSQL (-store postgres, the default) it works in a database of its
// own, durable_bench_<random>, created on the server named by DATABASE_URL
// (default postgres://postgres@127.0.0.1:5432/postgres) and dropped at the
// end unless -keep; -db names an existing database to use instead (neither
// created nor dropped). Workloads that need engine processes of their own
// (W2's cross-process half, W6) re-execute this program as workers.
//
// On SQLite (-store sqlite) it works in a fresh file in a temporary
// directory, removed at the end unless -keep (then its path is printed on
// standard error). What SQLite cannot do is skipped, with the reason in the
// table and in the line's "skipped": W2 from another process and W6 (the
// SQLite store's notes do not cross processes), and W1's commit count (a
// statistic of PostgreSQL's).
//
//	go run ./cmd/durable-bench                      # every workload, full size
//	go run ./cmd/durable-bench -workloads W1,W2     # some of them
//	go run ./cmd/durable-bench -short -json-only    # tiny sizes, for CI
//	go run ./cmd/durable-bench -store sqlite -workloads W1,W2,W3
//
// See docs/performance.md for what each workload measures and the figures.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

// defaultURL is the server used when neither -db nor DATABASE_URL is set.
const defaultURL = "postgres://postgres@127.0.0.1:5432/postgres"

// The stores the driver runs on (-store).
const (
	storePostgres = "postgres"
	storeSQLite   = "sqlite"
)

// allWorkloads lists the workloads.
var allWorkloads = []string{"W1", "W2", "W3", "W4", "W5", "W6"}

// runOrder is the order the workloads run in. W5 runs last: its sleeping
// runs stay in the tables, and would sit under the others.
var runOrder = []string{"W1", "W2", "W3", "W4", "W6", "W5"}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := dispatch(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "durable-bench:", err)
		os.Exit(1)
	}
}

// dispatch runs the driver, or a worker process when args start with the
// hidden worker command.
func dispatch(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == workerCommand {
		return runWorker(ctx, args[1:], stdin, stdout, stderr)
	}
	return run(ctx, args, stdout, stderr)
}

// config is the driver's flags.
type config struct {
	workloads  []string
	short      bool
	jsonOnly   bool
	keep       bool
	store      string // storePostgres or storeSQLite
	dbURL      string
	workflows  int           // W1, W6
	starters   int           // W1, W3, W6
	sequential int           // W2
	sleepers   int           // W3
	sleep      time.Duration // W3
	events     int           // W4
	idle       int           // W5
	procs      []int         // W6
	conns      int
	cache      int // each engine's Options.CacheSize; 0 is the engine's default
	// activityTime is how long each of W1's and W6's activities takes; 0
	// makes them no-ops.
	activityTime time.Duration
	cpuProfile   string // file for the driver process's CPU profile, if set
	memProfile   string // file for the driver process's allocation profile, if set
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	var c config
	fs := flag.NewFlagSet("durable-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	workloads := fs.String("workloads", strings.Join(allWorkloads, ","), "comma-separated workloads to run, of W1 to W6; they run in the order W1 W2 W3 W4 W6 W5")
	fs.BoolVar(&c.short, "short", false, "tiny sizes, for CI: W1 50 workflows, W2 20, W3 20 sleepers of 200ms, W4 1,000 events, W5 200, W6 1 and 2 processes of 50 (flags set explicitly win)")
	fs.BoolVar(&c.jsonOnly, "json-only", false, "print only the JSON lines, no table and no progress")
	fs.BoolVar(&c.keep, "keep", false, "keep the database (or SQLite file) the driver created")
	fs.StringVar(&c.store, "store", storePostgres, "the store to run on: postgres, or sqlite (a fresh file in a temporary directory; W2 from another process and W6 are skipped)")
	fs.StringVar(&c.dbURL, "db", "", "URL of an existing, empty PostgreSQL database to run in; it is neither created nor dropped (default: create durable_bench_<random> on DATABASE_URL's server)")
	fs.IntVar(&c.workflows, "n", 2000, "W1 and W6: workflows started")
	fs.IntVar(&c.starters, "starters", 32, "W1, W3 and W6: concurrent starters")
	fs.IntVar(&c.sequential, "sequential", 200, "W2: start-and-wait round trips, each way")
	fs.IntVar(&c.sleepers, "sleepers", 500, "W3: sleeping runs")
	fs.DurationVar(&c.sleep, "sleep", 2*time.Second, "W3: how long each run sleeps")
	fs.IntVar(&c.events, "events", 10_000, "W4: events in the replayed histories")
	fs.IntVar(&c.idle, "idle", 10_000, "W5: runs left asleep (the issue asks for 100,000: pass -idle 100000)")
	procs := fs.String("procs", "1,2,4", "W6: engine process counts")
	fs.IntVar(&c.conns, "conns", 20, "PostgreSQL connections per engine process (W6 caps its workers' total at 48); the SQLite store has its own")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write the CPU profile of the driver's process (its engines, not W6's workers) while the workloads run to this file, for go tool pprof")
	fs.StringVar(&c.memProfile, "memprofile", "", "write the allocation profile of the driver's process (what it allocated from its start to the end of the workloads) to this file, for go tool pprof -sample_index=alloc_space")
	fs.DurationVar(&c.activityTime, "activity-time", 0, "W1 and W6: how long each activity takes, waiting on a timer (0: a no-op); with W6, shows how processes scale where the machine's CPU is not the limit")
	fs.IntVar(&c.cache, "cache", 0, "live runs each engine keeps in its workflow cache (engine.Options.CacheSize; 0: the engine's default, 10,000)")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments %q: every option is a flag (see -help)", fs.Args())
	}
	switch c.store {
	case storePostgres:
	case storeSQLite:
		if c.dbURL != "" {
			return c, errors.New("-db names a PostgreSQL database: with -store sqlite the driver runs in a fresh file of its own (drop -db, or use -store postgres)")
		}
	default:
		return c, fmt.Errorf("-store: unknown store %q: want postgres or sqlite", c.store)
	}
	if c.short {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		short := map[string]func(){
			"n":          func() { c.workflows = 50 },
			"sequential": func() { c.sequential = 20 },
			"sleepers":   func() { c.sleepers = 20 },
			"sleep":      func() { c.sleep = 200 * time.Millisecond },
			"events":     func() { c.events = 1000 },
			"idle":       func() { c.idle = 200 },
			"procs":      func() { *procs = "1,2" },
		}
		for name, apply := range short {
			if !set[name] {
				apply()
			}
		}
	}
	for _, w := range strings.Split(*workloads, ",") {
		w = strings.ToUpper(strings.TrimSpace(w))
		if !slices.Contains(allWorkloads, w) {
			return c, fmt.Errorf("-workloads: unknown workload %q: want some of %s", w, strings.Join(allWorkloads, ","))
		}
		if !slices.Contains(c.workloads, w) {
			c.workloads = append(c.workloads, w)
		}
	}
	for _, p := range strings.Split(*procs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 1 {
			return c, fmt.Errorf("-procs: %q is not a positive process count", p)
		}
		c.procs = append(c.procs, n)
	}
	for name, v := range map[string]int{
		"n": c.workflows, "starters": c.starters, "sequential": c.sequential, "sleepers": c.sleepers, "idle": c.idle, "conns": c.conns,
	} {
		if v < 1 {
			return c, fmt.Errorf("-%s must be at least 1", name)
		}
	}
	if c.cache < 0 {
		return c, fmt.Errorf("-cache must not be negative (0 keeps the engine's default)")
	}
	if c.events < 4 || c.events%2 != 0 {
		return c, errors.New("-events must be even and at least 4: a started and a completed event around pairs of scheduled and completed")
	}
	if c.sleep <= 0 {
		return c, errors.New("-sleep must be positive")
	}
	if c.activityTime < 0 {
		return c, errors.New("-activity-time must not be negative (0 makes the activities no-ops)")
	}
	return c, nil
}

// run is the driver: it sets up the database, runs the chosen workloads in
// order and prints what they measured.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	c, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	progress := stderr
	if c.jsonOnly {
		progress = io.Discard
	}
	b, err := openBench(ctx, c, stderr, progress)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.close()) }()
	if c.cpuProfile != "" {
		stop, err := startCPUProfile(c.cpuProfile)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, stop()) }()
	}
	if c.memProfile != "" {
		defer func() { err = errors.Join(err, writeAllocProfile(c.memProfile)) }()
	}

	steps := map[string]func(context.Context) (result, error){
		"W1": b.w1, "W2": b.w2, "W3": b.w3, "W4": b.w4, "W5": b.w5, "W6": b.w6,
	}
	var done []result
	for _, w := range runOrder {
		if !slices.Contains(c.workloads, w) {
			continue
		}
		fmt.Fprintf(progress, "%s: running\n", w)
		t0 := time.Now()
		res, err := steps[w](ctx)
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		fmt.Fprintf(progress, "%s: done in %.1fs\n", w, time.Since(t0).Seconds())
		line, err := json.Marshal(res)
		if err != nil {
			return fmt.Errorf("%s: encode result: %w", w, err)
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
			return err
		}
		done = append(done, res)
	}
	if c.jsonOnly {
		return nil
	}
	return printTable(stdout, done)
}

// printTable prints what each workload measured, one figure a line.
func printTable(w io.Writer, results []result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nworkload\tmeasure\tfigure")
	for _, r := range results {
		for i, row := range r.rows() {
			name := ""
			if i == 0 {
				name = r.name()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\n", name, row.what, row.figure)
		}
	}
	return tw.Flush()
}

// writeAllocProfile writes this process's allocation profile to the file
// at path.
func writeAllocProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("-memprofile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		return errors.Join(fmt.Errorf("-memprofile: %w", err), f.Close())
	}
	return f.Close()
}

// startCPUProfile profiles this process's CPU into the file at path until
// the returned function is called.
func startCPUProfile(path string) (stop func() error, err error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("-cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		return nil, errors.Join(fmt.Errorf("-cpuprofile: %w", err), f.Close())
	}
	return func() error {
		pprof.StopCPUProfile()
		return f.Close()
	}, nil
}

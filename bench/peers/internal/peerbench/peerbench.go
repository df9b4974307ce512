// Package peerbench is what the peer-engine benchmarks share: their flags,
// the bench database's creation and removal, the W1 open loop and the W2
// sequential round trips, and the table and JSON lines they print.
//
// The workloads are defined as in durable's own load driver
// (cmd/durable-bench), and measured with the same code
// (internal/benchkit: the open loop, busy CPU, percentiles, commit
// counts), so the figures of the three engines can be put side by side.
// Nothing else of durable's is used.
package peerbench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/benchkit"
)

// Workflow kinds an engine starts.
const (
	// Three is W1's workflow: three sequential no-op steps x -> x+1.
	Three = 3
	// One is W2's workflow: one no-op step x -> x+1.
	One = 1
)

// Engine is one peer engine, running in this process on the bench
// database.
type Engine interface {
	// Start starts a workflow of steps no-op steps (Three or One) on input
	// x, and returns a function that waits for its result, which must be
	// x+steps.
	Start(ctx context.Context, steps, x int) (wait func(context.Context) (int, error), err error)
	// Stop stops the engine and closes every database connection it opened.
	Stop(ctx context.Context) error
}

// Peer is what a benchmark program supplies.
type Peer struct {
	// Name is the engine's name in the output.
	Name string
	// Notes are printed under the table (how the peer is configured).
	Notes []string
	// Setup prepares the bench database (schema, migrations) once, before
	// any workload; its commits are not counted.
	Setup func(ctx context.Context, dbURL string, conns int) error
	// Open starts an engine on the bench database with a pool of conns
	// connections. Run sends a warm-up workflow through it before it
	// measures.
	Open func(ctx context.Context, dbURL string, conns int) (Engine, error)
}

// Config is the flags.
type Config struct {
	Workloads  []string
	N          int
	Starters   int
	Sequential int
	Conns      int
	Keep       bool
}

// Flags registers the shared flags on fs and returns a function that checks
// and returns them once fs has parsed.
func Flags(fs *flag.FlagSet) func() (Config, error) {
	var c Config
	workloads := fs.String("workloads", "W1,W2", "comma-separated workloads to run: W1 (open-loop throughput of three-step workflows), W2 (sequential one-step round trips)")
	fs.IntVar(&c.N, "n", 2000, "W1: workflows started")
	fs.IntVar(&c.Starters, "starters", 32, "W1: concurrent starter goroutines")
	fs.IntVar(&c.Sequential, "sequential", 200, "W2: start-and-wait round trips (after one warm-up round trip that is not counted)")
	fs.IntVar(&c.Conns, "conns", 20, "database connections in the engine's pool (durable-bench's default; DBOS's own default pool size is also 20)")
	fs.BoolVar(&c.Keep, "keep", false, "keep the bench database instead of dropping it at the end")
	return func() (Config, error) {
		if fs.NArg() > 0 {
			return c, fmt.Errorf("unexpected arguments %q: every option is a flag (see -help)", fs.Args())
		}
		for _, w := range strings.Split(*workloads, ",") {
			w = strings.ToUpper(strings.TrimSpace(w))
			if w != "W1" && w != "W2" {
				return c, fmt.Errorf("-workloads: unknown workload %q: want W1 and/or W2", w)
			}
			if !slices.Contains(c.Workloads, w) {
				c.Workloads = append(c.Workloads, w)
			}
		}
		for name, v := range map[string]int{"n": c.N, "starters": c.Starters, "sequential": c.Sequential, "conns": c.Conns} {
			if v < 1 {
				return c, fmt.Errorf("-%s must be at least 1", name)
			}
		}
		return c, nil
	}
}

// Main parses the flags in os.Args (with extra registering the program's
// own), runs the chosen workloads on p in a fresh database and prints
// their figures: a table on stderr and one JSON line a workload on stdout.
// peer is called after the flags are parsed. It exits the process.
func Main(extra func(*flag.FlagSet), peer func() Peer) {
	fs := flag.NewFlagSet(os.Args[0], flag.ContinueOnError)
	if extra != nil {
		extra(fs)
	}
	cfg := Flags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return
		}
		os.Exit(2)
	}
	c, err := cfg()
	if err == nil {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = Run(ctx, c, peer(), os.Stdout, os.Stderr)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// Run runs c's workloads on p in a fresh database on DATABASE_URL's server.
func Run(ctx context.Context, c Config, p Peer, stdout, stderr io.Writer) (err error) {
	db, err := CreateDB(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.Close(c.Keep, stderr)) }()
	fmt.Fprintf(stderr, "%s: setting up database %s\n", p.Name, db.Name)
	if err := p.Setup(ctx, db.URL, c.Conns); err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	var results []any
	for _, w := range []string{"W1", "W2"} {
		if !slices.Contains(c.Workloads, w) {
			continue
		}
		fmt.Fprintf(stderr, "%s %s: running\n", p.Name, w)
		t0 := time.Now()
		var res any
		if w == "W1" {
			res, err = w1(ctx, c, p, db)
		} else {
			res, err = w2(ctx, c, p, db)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", w, err)
		}
		fmt.Fprintf(stderr, "%s %s: done in %.1fs\n", p.Name, w, time.Since(t0).Seconds())
		line, err := json.Marshal(res)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(stdout, "%s\n", line); err != nil {
			return err
		}
		results = append(results, res)
	}
	return printTable(stderr, p, results)
}

// W1Result is W1's JSON line.
type W1Result struct {
	Engine     string  `json:"engine"`
	Workload   string  `json:"workload"`
	Workflows  int     `json:"workflows"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"throughput_per_s"`
	P50        float64 `json:"p50_ms"`
	P99        float64 `json:"p99_ms"`
	// Commits is pg_stat_database.xact_commit of the bench database after
	// minus before; it includes the engine's start-up, warm-up workflow and
	// shutdown, as durable-bench's does.
	Commits int64 `json:"xact_commits"`
	// BusyCPU is the machine's busy CPU (PostgreSQL included) over the
	// span, per workflow.
	BusyCPU float64 `json:"busy_cpu_ms_per_workflow"`
}

// W2Result is W2's JSON line.
type W2Result struct {
	Engine   string  `json:"engine"`
	Workload string  `json:"workload"`
	Runs     int     `json:"runs"`
	P50      float64 `json:"p50_ms"`
	P99      float64 `json:"p99_ms"`
}

// open opens p's engine and sends a warm-up One workflow through it.
func open(ctx context.Context, c Config, p Peer, db *DB) (Engine, error) {
	e, err := p.Open(ctx, db.URL, c.Conns)
	if err != nil {
		return nil, fmt.Errorf("start engine: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := roundTrip(wctx, e, One, 0); err != nil {
		return nil, errors.Join(fmt.Errorf("warm-up workflow: %w", err), e.Stop(ctx))
	}
	return e, nil
}

// roundTrip starts one workflow and waits for its result, which it checks.
func roundTrip(ctx context.Context, e Engine, steps, x int) error {
	wait, err := e.Start(ctx, steps, x)
	if err != nil {
		return fmt.Errorf("start workflow %d: %w", x, err)
	}
	return check(ctx, wait, steps, x)
}

func check(ctx context.Context, wait func(context.Context) (int, error), steps, x int) error {
	got, err := wait(ctx)
	if err != nil {
		return fmt.Errorf("result of workflow %d: %w", x, err)
	}
	if got != x+steps {
		return fmt.Errorf("result of workflow %d: got %d, want %d", x, got, x+steps)
	}
	return nil
}

func w1(ctx context.Context, c Config, p Peer, db *DB) (W1Result, error) {
	c0, err := db.Commits(ctx)
	if err != nil {
		return W1Result{}, err
	}
	e, err := open(ctx, c, p, db)
	if err != nil {
		return W1Result{}, err
	}
	lt, err := OpenLoop(ctx, e, c.N, c.Starters)
	if err := errors.Join(err, e.Stop(context.WithoutCancel(ctx))); err != nil {
		return W1Result{}, err
	}
	c1, err := db.Commits(ctx)
	if err != nil {
		return W1Result{}, err
	}
	l := LatencyOf(lt.Lat)
	return W1Result{
		Engine: p.Name, Workload: "W1", Workflows: c.N,
		Seconds:    Round(lt.Span.Seconds(), 3),
		Throughput: Round(float64(c.N)/lt.Span.Seconds(), 1),
		P50:        l.P50, P99: l.P99,
		Commits: c1 - c0,
		BusyCPU: Round(MS(lt.Busy)/float64(c.N), 3),
	}, nil
}

func w2(ctx context.Context, c Config, p Peer, db *DB) (W2Result, error) {
	e, err := open(ctx, c, p, db)
	if err != nil {
		return W2Result{}, err
	}
	lat := make([]time.Duration, 0, c.Sequential)
	// One more warm-up round trip than open's, as durable-bench's W2 does
	// on an engine that has already run its warm-up workflow.
	for i := range c.Sequential + 1 {
		t0 := time.Now()
		if err = roundTrip(ctx, e, One, i); err != nil {
			break
		}
		if i > 0 {
			lat = append(lat, time.Since(t0))
		}
	}
	if err := errors.Join(err, e.Stop(context.WithoutCancel(ctx))); err != nil {
		return W2Result{}, err
	}
	l := LatencyOf(lat)
	return W2Result{Engine: p.Name, Workload: "W2", Runs: c.Sequential, P50: l.P50, P99: l.P99}, nil
}

// OpenLoop starts n Three workflows on e, inputs 0..n-1, from starters
// goroutines as fast as they go (benchkit.OpenLoop, as durable-bench's W1);
// each start is followed by a goroutine that waits for its result and
// checks it. The first error stops it.
func OpenLoop(ctx context.Context, e Engine, n, starters int) (benchkit.Loop, error) {
	return benchkit.OpenLoop(ctx, n, starters, func(ctx context.Context, i int) (func(context.Context) error, error) {
		wait, err := e.Start(ctx, Three, i)
		if err != nil {
			return nil, fmt.Errorf("start workflow %d: %w", i, err)
		}
		return func(ctx context.Context) error { return check(ctx, wait, Three, i) }, nil
	})
}

// Latency is the median and 99th percentile of a set of durations, in ms.
type Latency struct{ P50, P99 float64 }

// LatencyOf returns the nearest-rank p50 and p99 of ds (which it sorts).
func LatencyOf(ds []time.Duration) Latency {
	slices.Sort(ds)
	return Latency{P50: MS(benchkit.Quantile(ds, 0.50)), P99: MS(benchkit.Quantile(ds, 0.99))}
}

// MS is d in milliseconds, to the microsecond.
func MS(d time.Duration) float64 { return Round(float64(d)/float64(time.Millisecond), 3) }

// Round rounds x to digits decimal places.
func Round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

func printTable(w io.Writer, p Peer, results []any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nengine\tworkload\tmeasure\tfigure\n")
	for _, r := range results {
		switch r := r.(type) {
		case W1Result:
			fmt.Fprintf(tw, "%s\tW1\tworkflows\t%d in %.3f s\n", r.Engine, r.Workflows, r.Seconds)
			fmt.Fprintf(tw, "\t\tthroughput\t%.1f workflows/s\n", r.Throughput)
			fmt.Fprintf(tw, "\t\tstart-to-result latency\tp50 %.3f ms, p99 %.3f ms\n", r.P50, r.P99)
			fmt.Fprintf(tw, "\t\ttransactions committed\t%d (%.2f per step)\n", r.Commits, float64(r.Commits)/float64(3*r.Workflows))
			fmt.Fprintf(tw, "\t\tbusy CPU per workflow\t%.3f ms (machine-wide, PostgreSQL included)\n", r.BusyCPU)
		case W2Result:
			fmt.Fprintf(tw, "%s\tW2\tsequential round trips\t%d\n", r.Engine, r.Runs)
			fmt.Fprintf(tw, "\t\tlatency\tp50 %.3f ms, p99 %.3f ms\n", r.P50, r.P99)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// DB is the bench database, created on DATABASE_URL's server.
type DB struct {
	// Name is the database's name, durable_peer_<random hex>.
	Name string
	// URL is DATABASE_URL with the database replaced by Name.
	URL   string
	admin *pgx.Conn
}

// CreateDB creates a fresh database durable_peer_<random hex> on the server
// DATABASE_URL names.
func CreateDB(ctx context.Context) (*DB, error) {
	raw := os.Getenv("DATABASE_URL")
	if raw == "" {
		return nil, errors.New("DATABASE_URL is not set: set it to a PostgreSQL server URL, e.g. postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable")
	}
	cfg, err := pgx.ParseConfig(raw)
	if err != nil {
		return nil, fmt.Errorf("DATABASE_URL: %w", err)
	}
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect to DATABASE_URL: %w", err)
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "durable_peer_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return nil, errors.Join(fmt.Errorf("create database %s: %w", name, err), admin.Close(ctx))
	}
	u := withDatabase(raw, name)
	return &DB{Name: name, URL: u, admin: admin}, nil
}

// withDatabase returns the URL (or key=value DSN) raw with its database
// replaced by name.
func withDatabase(raw, name string) string {
	if strings.HasPrefix(raw, "postgres://") || strings.HasPrefix(raw, "postgresql://") {
		rest, query, _ := strings.Cut(raw, "?")
		scheme, hostpart, _ := strings.Cut(rest, "://")
		host, _, _ := strings.Cut(hostpart, "/")
		u := scheme + "://" + host + "/" + name
		if query != "" {
			u += "?" + query
		}
		return u
	}
	return raw + " dbname=" + name
}

// Close drops the database unless keep, and closes the admin connection.
func (d *DB) Close(keep bool, stderr io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var err error
	if keep {
		fmt.Fprintf(stderr, "kept database %s\n", d.Name)
	} else if _, e := d.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+d.Name+" WITH (FORCE)"); e != nil {
		err = fmt.Errorf("drop database %s: %w", d.Name, e)
	}
	return errors.Join(err, d.admin.Close(ctx))
}

// Commits returns pg_stat_database.xact_commit of the bench database,
// once no client is connected to it (benchkit.Commits, as durable-bench
// reads it): every engine must have closed its connections by then.
func (d *DB) Commits(ctx context.Context) (int64, error) {
	return benchkit.Commits(ctx, d.admin, d.Name)
}

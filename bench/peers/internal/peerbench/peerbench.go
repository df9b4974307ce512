// Package peerbench is what the peer-engine benchmarks share: their flags,
// the bench store's creation and removal (a PostgreSQL database, or a
// SQLite file), the W1 open loop and the W2 sequential round trips, and the
// table and JSON lines they print.
//
// The workloads are defined as in durable's own load driver
// (cmd/durable-bench), and measured with the same code
// (internal/benchkit: the open loop, busy CPU, percentiles, commit
// counts), so the figures of every engine can be put side by side.
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
	"os"
	"os/signal"
	"path/filepath"
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

// Stores a peer runs on (Peer.Store, and the JSON lines' "store").
const (
	// Postgres is a fresh database on DATABASE_URL's server.
	Postgres = "postgres"
	// SQLite is a fresh SQLite file in a new temporary directory.
	SQLite = "sqlite"
)

// WhyNoCommitCount is why W1 has no commit count on SQLite (its JSON
// line's "skipped"), in durable-bench's words.
const WhyNoCommitCount = "the commit count is PostgreSQL's statistic (pg_stat_database.xact_commit); SQLite keeps none"

// Engine is one peer engine, running in this process on the bench store.
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
	// Store is the store the engine runs on: Postgres (also when empty)
	// or SQLite.
	Store string
	// NoConns, if not empty, is why -conns does not apply to this engine
	// (it has no pool size to set): -conns is then refused.
	NoConns string
	// Notes are printed under the table (how the peer is configured).
	Notes []string
	// Setup prepares the bench store (schema, migrations) once, before any
	// workload; its commits are not counted. db is the bench database's
	// URL on PostgreSQL, the SQLite file's path on SQLite.
	Setup func(ctx context.Context, db string, conns int) error
	// Open starts an engine on the bench store db (as for Setup) with a
	// pool of conns connections. Run sends a warm-up workflow through it
	// before it measures.
	Open func(ctx context.Context, db string, conns int) (Engine, error)
}

// store returns p's store, Postgres if it names none.
func (p Peer) store() string {
	if p.Store == "" {
		return Postgres
	}
	return p.Store
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
	fs.BoolVar(&c.Keep, "keep", false, "keep the bench database (or SQLite file) instead of removing it at the end")
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
		p := peer()
		if p.NoConns != "" && isSet(fs, "conns") {
			fmt.Fprintf(os.Stderr, "-conns does not apply to %s: %s\n", p.Name, p.NoConns)
			os.Exit(2)
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err = Run(ctx, c, p, os.Stdout, os.Stderr)
		stop()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// isSet reports whether flag name was given on the command line.
func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// Run runs c's workloads on p in a fresh store: a database on
// DATABASE_URL's server, or a SQLite file in a new temporary directory.
func Run(ctx context.Context, c Config, p Peer, stdout, stderr io.Writer) (err error) {
	var db store
	switch p.store() {
	case Postgres:
		db, err = CreateDB(ctx)
	case SQLite:
		db, err = CreateSQLiteFile()
	default:
		err = fmt.Errorf("peer %s: unknown store %q", p.Name, p.Store)
	}
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, db.close(c.Keep, stderr)) }()
	fmt.Fprintf(stderr, "%s: setting up %s\n", p.Name, db)
	if err := p.Setup(ctx, db.location(), c.Conns); err != nil {
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

// store is where a run's engines keep their state.
type store interface {
	// String names it in the progress lines.
	String() string
	// location is what Peer.Setup and Peer.Open get.
	location() string
	// commits returns its commit count so far, or ok false (and no error)
	// where it keeps none.
	commits(ctx context.Context) (n int64, ok bool, err error)
	// close removes it, unless keep: then it says where it is.
	close(keep bool, stderr io.Writer) error
}

// W1Result is W1's JSON line.
type W1Result struct {
	Engine   string `json:"engine"`
	Store    string `json:"store"`
	Workload string `json:"workload"`
	// Skipped is empty when every figure was measured; otherwise it names
	// the fields left out and why ("xact_commits: ..."), as durable-bench's
	// lines do.
	Skipped    string  `json:"skipped,omitempty"`
	Workflows  int     `json:"workflows"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"throughput_per_s"`
	Latency
	// Commits is pg_stat_database.xact_commit of the bench database after
	// minus before; it includes the engine's start-up, warm-up workflow and
	// shutdown, as durable-bench's does. Nil (and left out) on SQLite.
	Commits *int64 `json:"xact_commits,omitempty"`
	// BusyCPU is the machine's busy CPU (PostgreSQL included, if it runs
	// here) over the span, per workflow.
	BusyCPU float64 `json:"busy_cpu_ms_per_workflow"`
}

// W2Result is W2's JSON line.
type W2Result struct {
	Engine   string `json:"engine"`
	Store    string `json:"store"`
	Workload string `json:"workload"`
	Runs     int    `json:"runs"`
	Latency
}

// open opens p's engine and sends a warm-up One workflow through it.
func open(ctx context.Context, c Config, p Peer, db store) (Engine, error) {
	e, err := p.Open(ctx, db.location(), c.Conns)
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

func w1(ctx context.Context, c Config, p Peer, db store) (W1Result, error) {
	c0, counted, err := db.commits(ctx)
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
	r := W1Result{
		Engine: p.Name, Store: p.store(), Workload: "W1", Workflows: c.N,
		Seconds:    benchkit.Round(lt.Span.Seconds(), 3),
		Throughput: benchkit.Round(float64(c.N)/lt.Span.Seconds(), 1),
		Latency:    benchkit.LatencyOf(lt.Lat),
		BusyCPU:    benchkit.Round(benchkit.MS(lt.Busy)/float64(c.N), 3),
	}
	if !counted {
		r.Skipped = "xact_commits: " + WhyNoCommitCount
		return r, nil
	}
	c1, _, err := db.commits(ctx)
	if err != nil {
		return W1Result{}, err
	}
	n := c1 - c0
	r.Commits = &n
	return r, nil
}

func w2(ctx context.Context, c Config, p Peer, db store) (W2Result, error) {
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
	return W2Result{Engine: p.Name, Store: p.store(), Workload: "W2", Runs: c.Sequential, Latency: benchkit.LatencyOf(lat)}, nil
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

// Latency is benchkit.Latency, the load driver's.
type Latency = benchkit.Latency

// latencyText formats l for the table.
func latencyText(l Latency) string {
	return fmt.Sprintf("p50 %.3f ms, p99 %.3f ms, p99.9 %.3f ms, max %.3f ms", l.P50, l.P99, l.P999, l.Max)
}

func printTable(w io.Writer, p Peer, results []any) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nengine\tworkload\tmeasure\tfigure\n")
	for _, r := range results {
		switch r := r.(type) {
		case W1Result:
			fmt.Fprintf(tw, "%s\tW1\tworkflows\t%d in %.3f s\n", r.Engine, r.Workflows, r.Seconds)
			fmt.Fprintf(tw, "\t\tthroughput\t%.1f workflows/s\n", r.Throughput)
			fmt.Fprintf(tw, "\t\tstart-to-result latency\t%s\n", latencyText(r.Latency))
			if r.Commits != nil {
				fmt.Fprintf(tw, "\t\ttransactions committed\t%d (%.2f per step)\n", *r.Commits, float64(*r.Commits)/float64(3*r.Workflows))
			} else {
				fmt.Fprintf(tw, "\t\ttransactions committed\tskipped: %s\n", WhyNoCommitCount)
			}
			if r.Store == Postgres {
				fmt.Fprintf(tw, "\t\tbusy CPU per workflow\t%.3f ms (machine-wide, PostgreSQL included)\n", r.BusyCPU)
			} else {
				fmt.Fprintf(tw, "\t\tbusy CPU per workflow\t%.3f ms (machine-wide)\n", r.BusyCPU)
			}
		case W2Result:
			fmt.Fprintf(tw, "%s\tW2\tsequential round trips\t%d\n", r.Engine, r.Runs)
			fmt.Fprintf(tw, "\t\tlatency\t%s\n", latencyText(r.Latency))
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

// The bench database as a store.

func (d *DB) String() string   { return "database " + d.Name }
func (d *DB) location() string { return d.URL }
func (d *DB) commits(ctx context.Context) (int64, bool, error) {
	n, err := d.Commits(ctx)
	return n, err == nil, err
}
func (d *DB) close(keep bool, stderr io.Writer) error { return d.Close(keep, stderr) }

// sqliteName is the name of the bench's SQLite file in its directory (as
// durable-bench's).
const sqliteName = "bench.db"

// SQLiteFile is the bench's SQLite file: its path in a new temporary
// directory, where the engine creates it (with its WAL and shared-memory
// files beside it).
type SQLiteFile struct {
	// Dir is the temporary directory, removed at the end.
	Dir string
	// Path is the SQLite file in Dir, not yet created.
	Path string
}

// CreateSQLiteFile makes a new temporary directory durable-peer-* for the
// bench's SQLite file.
func CreateSQLiteFile() (*SQLiteFile, error) {
	dir, err := os.MkdirTemp("", "durable-peer-")
	if err != nil {
		return nil, fmt.Errorf("make a directory for the SQLite file: %w (set TMPDIR to a writable directory)", err)
	}
	return &SQLiteFile{Dir: dir, Path: filepath.Join(dir, sqliteName)}, nil
}

// Close removes the file's directory, unless keep: then it says where the
// file is.
func (f *SQLiteFile) Close(keep bool, stderr io.Writer) error {
	if keep {
		fmt.Fprintf(stderr, "kept SQLite file %s\n", f.Path)
		return nil
	}
	if err := os.RemoveAll(f.Dir); err != nil {
		return fmt.Errorf("remove the SQLite file's directory: %w", err)
	}
	return nil
}

// The SQLite file as a store: it keeps no commit count.

func (f *SQLiteFile) String() string                               { return "SQLite file " + f.Path }
func (f *SQLiteFile) location() string                             { return f.Path }
func (f *SQLiteFile) commits(context.Context) (int64, bool, error) { return 0, false, nil }
func (f *SQLiteFile) close(keep bool, stderr io.Writer) error      { return f.Close(keep, stderr) }

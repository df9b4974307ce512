package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/benchkit"
	"github.com/durable-go/durable/internal/pgtest"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == workerCommand {
		// The driver re-executes os.Executable(), this test binary, as its
		// worker processes.
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		err := runWorker(ctx, os.Args[2:], os.Stdin, os.Stdout, os.Stderr)
		stop()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	goleak.VerifyTestMain(m)
}

// TestShortRun runs every workload in short mode, worker processes
// included, and checks that each prints one JSON line of sane figures.
func TestShortRun(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	ctx, cancel := context.WithTimeout(t.Context(), 55*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-short", "-json-only", "-db", db}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())

	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, len(allWorkloads), "one JSON line per workload, nothing else:\n%s", stdout.String())
	got := parseLines(t, lines)
	for _, w := range allWorkloads {
		require.Contains(t, got, w)
		require.Equal(t, "postgres", got[w]["store"], "%s names its store", w)
		require.NotContains(t, got[w], "skipped", "%s: nothing is skipped on PostgreSQL", w)
	}

	requireLoad(t, got["W1"], 50)
	requireCommits(t, got["W1"])
	requireLatency(t, field[map[string]any](t, got["W2"], "in_process"))
	requireLatency(t, field[map[string]any](t, got["W2"], "cross_process"))
	requireLatency(t, field[map[string]any](t, got["W2"], "cross_process_listening"))
	require.InDelta(t, 20.0, field[float64](t, got["W2"], "runs"), 0)

	w3 := got["W3"]
	require.InDelta(t, 20.0, field[float64](t, w3, "runs"), 0)
	requireLatency(t, field[map[string]any](t, w3, "lateness"))

	w4 := got["W4"]
	require.InDelta(t, 1000.0, field[float64](t, w4, "events"), 0)
	require.InDelta(t, 1000.0, field[float64](t, w4, "database_events"), 0, "the recorded run has as many events as the built one")
	for _, k := range []string{"replay_memory_cold_ms", "replay_memory_ms", "replay_file_ms", "replay_database_ms", "file_bytes"} {
		require.Positive(t, field[float64](t, w4, k), k)
	}
	require.InDelta(t, 499.0, field[float64](t, w4, "cached_steps"), 0)
	requireLatency(t, field[map[string]any](t, w4, "cached_step"))

	w5 := got["W5"]
	require.InDelta(t, 200.0, field[float64](t, w5, "runs"), 0)
	require.LessOrEqual(t, field[float64](t, w5, "goroutines_added"), 2.0, "a sleeping run holds no goroutine")
	require.Positive(t, field[float64](t, w5, "db_bytes_per_run"))
	require.Positive(t, field[float64](t, w5, "runs_put_to_sleep_per_s"))

	points := field[[]any](t, got["W6"], "points")
	require.Len(t, points, 2, "short mode runs 1 and 2 processes")
	for i, p := range points {
		m, ok := p.(map[string]any)
		require.True(t, ok, "point %d is an object", i)
		require.InDelta(t, float64(i+1), field[float64](t, m, "processes"), 0)
		requireLoad(t, m, 50)
		requireCommits(t, m)
		require.Positive(t, field[float64](t, m, "speedup"))
	}
}

// With -activity-time, W1 and W6 run ThreeWaits: every run takes at least
// its three waits, in whichever process runs it, and the lines say so.
func TestActivityTime(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-json-only", "-workloads", "W1,W6", "-n", "20", "-procs", "1", "-activity-time", "30ms", "-db", db}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	require.Len(t, lines, 2, stdout.String())
	var w1, w6 map[string]any
	require.NoError(t, json.Unmarshal([]byte(lines[0]), &w1))
	require.NoError(t, json.Unmarshal([]byte(lines[1]), &w6))
	for _, m := range []map[string]any{w1, w6} {
		require.InDelta(t, 30.0, field[float64](t, m, "activity_ms"), 0)
	}
	points := field[[]any](t, w6, "points")
	require.Len(t, points, 1)
	w6p, ok := points[0].(map[string]any)
	require.True(t, ok)
	for name, m := range map[string]map[string]any{"W1": w1, "W6": w6p} {
		requireLoad(t, m, 20)
		requireCommits(t, m)
		require.GreaterOrEqual(t, field[float64](t, m, "p50_ms"), 90.0, "%s: a run waits 3 x 30 ms", name)
	}
}

// The profiles asked for are written, in pprof's format (gzipped).
func TestProfiles(t *testing.T) {
	t.Parallel()
	db := pgtest.Database(t)
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "w1.prof"), filepath.Join(dir, "w1.mem")
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-short", "-json-only", "-workloads", "W1", "-db", db, "-cpuprofile", cpu, "-memprofile", mem}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	for _, path := range []string{cpu, mem} {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Greater(t, len(b), 2, path)
		require.Equal(t, []byte{0x1f, 0x8b}, b[:2], "%s is gzipped, as pprof writes", path)
	}
}

// parseLines decodes the JSON lines, one per workload, by workload.
func parseLines(t *testing.T, lines []string) map[string]map[string]any {
	t.Helper()
	got := map[string]map[string]any{}
	for _, line := range lines {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "line %q", line)
		name, _ := m["workload"].(string)
		require.NotContains(t, got, name, "workload %q printed twice", name)
		got[name] = m
	}
	return got
}

// requireLoad checks the figures of an open-loop run of n workflows.
func requireLoad(t *testing.T, m map[string]any, n float64) {
	t.Helper()
	require.InDelta(t, n, field[float64](t, m, "workflows"), 0)
	require.Positive(t, field[float64](t, m, "throughput_per_s"))
	requireLatency(t, m)
	require.GreaterOrEqual(t, field[float64](t, m, "busy_cpu_ms_per_workflow"), 0.0)
}

// requireCommits checks the commit count of an open-loop run on
// PostgreSQL.
func requireCommits(t *testing.T, m map[string]any) {
	t.Helper()
	require.Positive(t, field[float64](t, m, "xact_commits"))
	// Steps share transactions (group commit), so fewer commits than steps
	// is fine, but none means the count is broken; and a workflow's three
	// steps need far fewer than the 20 transactions each that would mean a
	// leak.
	perStep := field[float64](t, m, "commits_per_step")
	require.Positive(t, perStep, "commits per step")
	require.Less(t, perStep, 20.0, "commits per step")
}

// requireLatency checks that the percentiles in m are in order:
// 0 < p50 <= p99 <= p99.9 <= max.
func requireLatency(t *testing.T, m map[string]any) {
	t.Helper()
	p50, p99 := field[float64](t, m, "p50_ms"), field[float64](t, m, "p99_ms")
	p999, top := field[float64](t, m, "p999_ms"), field[float64](t, m, "max_ms")
	require.Positive(t, p50)
	require.LessOrEqual(t, p50, p99, "p50 <= p99")
	require.LessOrEqual(t, p99, p999, "p99 <= p99.9")
	require.LessOrEqual(t, p999, top, "p99.9 <= max")
}

func field[T any](t *testing.T, m map[string]any, key string) T {
	t.Helper()
	v, ok := m[key].(T)
	require.True(t, ok, "field %q is %#v, want a %T (in %v)", key, m[key], *new(T), m)
	return v
}

func TestParseFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		check   func(*testing.T, config)
		wantErr string
	}{
		{name: "defaults", check: func(t *testing.T, c config) {
			require.Equal(t, "postgres", c.store)
			require.Equal(t, allWorkloads, c.workloads)
			require.Equal(t, 2000, c.workflows)
			require.Equal(t, []int{1, 2, 4}, c.procs)
			require.Equal(t, 2*time.Second, c.sleep)
			require.Zero(t, c.cache, "0 keeps the engine's default cache size")
			require.Zero(t, c.activityTime, "no-op activities")
		}},
		{name: "cache", args: []string{"-cache", "40000"}, check: func(t *testing.T, c config) {
			require.Equal(t, 40000, c.cache)
		}},
		{name: "cpu profile", args: []string{"-cpuprofile", "w1.prof"}, check: func(t *testing.T, c config) {
			require.Equal(t, "w1.prof", c.cpuProfile)
		}},
		{name: "allocation profile", args: []string{"-memprofile", "w1.mem"}, check: func(t *testing.T, c config) {
			require.Equal(t, "w1.mem", c.memProfile)
		}},
		{name: "negative cache", args: []string{"-cache", "-1"}, wantErr: "-cache must not be negative"},
		{name: "activity time", args: []string{"-activity-time", "20ms"}, check: func(t *testing.T, c config) {
			require.Equal(t, 20*time.Millisecond, c.activityTime)
		}},
		{name: "negative activity time", args: []string{"-activity-time", "-1ms"}, wantErr: "-activity-time must not be negative"},
		{name: "short", args: []string{"-short"}, check: func(t *testing.T, c config) {
			require.Equal(t, 50, c.workflows)
			require.Equal(t, 200*time.Millisecond, c.sleep)
			require.Equal(t, []int{1, 2}, c.procs)
			require.Equal(t, 200, c.idle)
		}},
		{name: "explicit flags win over short", args: []string{"-short", "-n", "70", "-procs", "3"}, check: func(t *testing.T, c config) {
			require.Equal(t, 70, c.workflows)
			require.Equal(t, []int{3}, c.procs)
			require.Equal(t, 20, c.sequential)
		}},
		{name: "workloads", args: []string{"-workloads", "w2, W1,W2"}, check: func(t *testing.T, c config) {
			require.Equal(t, []string{"W2", "W1"}, c.workloads)
		}},
		{name: "unknown workload", args: []string{"-workloads", "W7"}, wantErr: `unknown workload "W7"`},
		{name: "bad procs", args: []string{"-procs", "1,x"}, wantErr: `-procs: "x"`},
		{name: "odd events", args: []string{"-events", "1001"}, wantErr: "-events must be even"},
		{name: "arguments", args: []string{"W1"}, wantErr: "unexpected arguments"},
		{name: "sqlite", args: []string{"-store", "sqlite"}, check: func(t *testing.T, c config) {
			require.Equal(t, "sqlite", c.store)
		}},
		{name: "unknown store", args: []string{"-store", "mysql"}, wantErr: `-store: unknown store "mysql"`},
		{name: "a database URL for sqlite", args: []string{"-store", "sqlite", "-db", "postgres://x/y"}, wantErr: "-db names a PostgreSQL database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, err := parseFlags(tt.args, &bytes.Buffer{})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			tt.check(t, c)
		})
	}
}

func TestTable(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	skipped := w2Result{head: head{Store: "sqlite", Workload: "W2"}, Runs: 20, InProcess: latency{P50: 1.5, P99: 4, P999: 4, Max: 4}}
	skipped.skip("cross_process, cross_process_listening", "no notes across processes")
	whole := skippedResult{head{Store: "sqlite", Workload: "W6"}}
	whole.skip("", "one process only")
	require.NoError(t, printTable(&b, []result{
		w2Result{
			head: head{Store: "postgres", Workload: "W2"}, Runs: 200, InProcess: latency{P50: 5.9, P99: 18, P999: 20.5, Max: 20.5},
			CrossProcess: &latency{P50: 7.25, P99: 30.5, P999: 31, Max: 31}, CrossProcessListening: &latency{},
		},
		skipped, whole,
	}))
	require.Equal(t, `
workload  measure                                                                 figure
W2        200 x start + result of a one-activity workflow, in the worker process  p50 5.90 ms, p99 18.0 ms, p99.9 20.5 ms, max 20.5 ms
          the same from a process that does not run the engine                    p50 7.25 ms, p99 30.5 ms, p99.9 31.0 ms, max 31.0 ms
          the same while another Result waits in that process                     p50 0.000 ms, p99 0.000 ms, p99.9 0.000 ms, max 0.000 ms
W2        20 x start + result of a one-activity workflow, in the worker process   p50 1.50 ms, p99 4.00 ms, p99.9 4.00 ms, max 4.00 ms
          the same from a process that does not run the engine                    skipped: no notes across processes
          the same while another Result waits in that process                     skipped: no notes across processes
W6        not run on sqlite                                                       skipped: one process only
`, b.String())
}

// A skipped part of a workload is left out of its JSON line, which says
// what was skipped and why; a workload skipped whole has no figure.
func TestSkippedJSON(t *testing.T) {
	t.Parallel()
	r := w2Result{head: head{Store: "sqlite", Workload: "W2"}, Runs: 1, InProcess: latency{P50: 1, P99: 2, P999: 3, Max: 4}}
	r.skip("cross_process, cross_process_listening", "no notes across processes")
	line, err := json.Marshal(r)
	require.NoError(t, err)
	require.JSONEq(t, `{"store": "sqlite", "workload": "W2", "skipped": "cross_process, cross_process_listening: no notes across processes",
		"runs": 1, "in_process": {"p50_ms": 1, "p99_ms": 2, "p999_ms": 3, "max_ms": 4}}`, string(line))

	whole := skippedResult{head{Store: "sqlite", Workload: "W6"}}
	whole.skip("", "one process only")
	line, err = json.Marshal(whole)
	require.NoError(t, err)
	require.JSONEq(t, `{"store": "sqlite", "workload": "W6", "skipped": "one process only"}`, string(line))
}

// The nearest-rank percentiles and the maximum of 2,000 durations of 1 to
// 2,000 ms, given out of order.
func TestLatencyOf(t *testing.T) {
	t.Parallel()
	ds := make([]time.Duration, 2000)
	for i := range ds {
		ds[i] = time.Duration(2000-i) * time.Millisecond
	}
	require.Equal(t, latency{P50: 1000, P99: 1980, P999: 1998, Max: 2000}, benchkit.LatencyOf(ds))
	require.Equal(t, latency{}, benchkit.LatencyOf(nil))
}

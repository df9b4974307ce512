package main

import (
	"fmt"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/durable-go/durable/internal/benchkit"
)

// result is what one workload measured: encoded as its JSON line, and
// shown as rows of the table.
type result interface {
	name() string
	rows() []row
}

type row struct{ what, figure string }

// latency is the median and 99th percentile of a set of durations, in
// milliseconds.
type latency struct {
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
}

// latencyOf returns the nearest-rank p50 and p99 of ds (which it sorts).
func latencyOf(ds []time.Duration) latency {
	slices.Sort(ds)
	return latency{P50: ms(benchkit.Quantile(ds, 0.50)), P99: ms(benchkit.Quantile(ds, 0.99))}
}

func (l latency) text() string { return fmt.Sprintf("p50 %s ms, p99 %s ms", num(l.P50), num(l.P99)) }

// ms is d in milliseconds, to the microsecond.
func ms(d time.Duration) float64 { return round(float64(d)/float64(time.Millisecond), 3) }

func round(x float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(x*p) / p
}

// num formats x with three significant digits, or as an integer when it
// has more digits than that before the point.
func num(x float64) string {
	switch a := math.Abs(x); {
	case a >= 100:
		return fmt.Sprintf("%.0f", x)
	case a >= 10:
		return fmt.Sprintf("%.1f", x)
	case a >= 1:
		return fmt.Sprintf("%.2f", x)
	default:
		return fmt.Sprintf("%.3f", x)
	}
}

// loadFigures is what an open-loop run of three-activity workflows
// measured (W1, and W6 per process count).
type loadFigures struct {
	Workflows  int     `json:"workflows"`
	Seconds    float64 `json:"seconds"`
	Throughput float64 `json:"throughput_per_s"`
	latency
	// Commits is pg_stat_database.xact_commit of the bench database, after
	// minus before; it includes the engines' start-up and shutdown.
	Commits        int64   `json:"xact_commits"`
	CommitsPerStep float64 `json:"commits_per_step"`
	// BusyCPU is the machine's busy CPU time (all processes, Postgres
	// included) per workflow, from /proc/stat; 0 where there is none.
	BusyCPU float64 `json:"busy_cpu_ms_per_workflow"`
}

func newLoadFigures(workflows int, lt benchkit.Loop, commits int64) loadFigures {
	return loadFigures{
		Workflows:      workflows,
		Seconds:        round(lt.Span.Seconds(), 3),
		Throughput:     round(float64(workflows)/lt.Span.Seconds(), 1),
		latency:        latencyOf(lt.Lat),
		Commits:        commits,
		CommitsPerStep: round(float64(commits)/float64(workflows*3), 3),
		BusyCPU:        round(ms(lt.Busy)/float64(workflows), 3),
	}
}

type w1Result struct {
	Workload string `json:"workload"`
	Starters int    `json:"starters"`
	// ActivityMS is -activity-time; 0 (left out) for no-op activities.
	ActivityMS float64 `json:"activity_ms,omitempty"`
	loadFigures
}

func (r w1Result) name() string { return r.Workload }
func (r w1Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d workflows of 3 %s, %d starters, in-process", r.Workflows, activities(r.ActivityMS), r.Starters),
			fmt.Sprintf("%s workflows/s (%s s)", num(r.Throughput), num(r.Seconds))},
		{"start to result", r.latency.text()},
		{"transactions per activity step", fmt.Sprintf("%s (%d commits)", num(r.CommitsPerStep), r.Commits)},
		{"busy CPU per workflow, machine-wide", num(r.BusyCPU) + " ms"},
	}
}

type w2Result struct {
	Workload     string  `json:"workload"`
	Runs         int     `json:"runs"`
	InProcess    latency `json:"in_process"`
	CrossProcess latency `json:"cross_process"`
	// CrossProcessListening is CrossProcess while another Result waits in
	// the starting process, so that its notification listener is up.
	CrossProcessListening latency `json:"cross_process_listening"`
}

func (r w2Result) name() string { return r.Workload }
func (r w2Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d x start + result of a one-activity workflow, in the worker process", r.Runs), r.InProcess.text()},
		{"the same from a process that does not run the engine", r.CrossProcess.text()},
		{"the same while another Result waits in that process", r.CrossProcessListening.text()},
	}
}

type w3Result struct {
	Workload     string  `json:"workload"`
	Runs         int     `json:"runs"`
	SleepMS      float64 `json:"sleep_ms"`
	StartSeconds float64 `json:"start_seconds"`
	Lateness     latency `json:"lateness"`
}

func (r w3Result) name() string { return r.Workload }
func (r w3Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d runs sleeping %s ms: result seen - (start call + sleep)", r.Runs, num(r.SleepMS)), r.Lateness.text()},
		{"time to start them all", num(r.StartSeconds) + " s"},
	}
}

type w4Result struct {
	Workload        string  `json:"workload"`
	Events          int     `json:"events"`
	MemoryColdMS    float64 `json:"replay_memory_cold_ms"`
	MemoryMS        float64 `json:"replay_memory_ms"`
	FileBytes       int64   `json:"file_bytes"`
	FileMS          float64 `json:"replay_file_ms"`
	DatabaseEvents  int     `json:"database_events"`
	DatabaseMS      float64 `json:"replay_database_ms"`
	Steps           int     `json:"cached_steps"`
	Step            latency `json:"cached_step"`
	StepFirstTenth  float64 `json:"cached_step_first_tenth_p50_ms"`
	StepLastTenth   float64 `json:"cached_step_last_tenth_p50_ms"`
	RecordedSeconds float64 `json:"record_seconds"`
}

func (r w4Result) name() string { return r.Workload }
func (r w4Result) rows() []row {
	return []row{
		{fmt.Sprintf("replay %d events from memory, cold / median of 5 more", r.Events), fmt.Sprintf("%s ms / %s ms", num(r.MemoryColdMS), num(r.MemoryMS))},
		{fmt.Sprintf("import a %s KB file and replay it", num(float64(r.FileBytes)/1024)), num(r.FileMS) + " ms"},
		{fmt.Sprintf("replay a recorded run of %d events from the database", r.DatabaseEvents), num(r.DatabaseMS) + " ms"},
		{fmt.Sprintf("one step of that run, cached (%d steps, %s s)", r.Steps, num(r.RecordedSeconds)), r.Step.text()},
		{"step p50: first tenth / last tenth of the run", fmt.Sprintf("%s ms / %s ms", num(r.StepFirstTenth), num(r.StepLastTenth))},
	}
}

type w5Result struct {
	Workload         string  `json:"workload"`
	Runs             int     `json:"runs"`
	GoroutinesAdded  int     `json:"goroutines_added"`
	HeapBytesPerRun  float64 `json:"heap_bytes_per_run"`
	DBBytesPerRun    float64 `json:"db_bytes_per_run"`
	SleepingRunsPerS float64 `json:"runs_put_to_sleep_per_s"`
}

func (r w5Result) name() string { return r.Workload }
func (r w5Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d runs asleep for 7 days: goroutines added", r.Runs), fmt.Sprint(r.GoroutinesAdded)},
		{"live heap per sleeping run", num(r.HeapBytesPerRun) + " B"},
		{"database per sleeping run", num(r.DBBytesPerRun) + " B"},
		{"started and asleep", num(r.SleepingRunsPerS) + " runs/s"},
	}
}

type w6Point struct {
	Processes int `json:"processes"`
	loadFigures
	// Speedup is the throughput over that of the first process count
	// measured (-procs; 1 by default).
	Speedup float64 `json:"speedup"`
}

type w6Result struct {
	Workload string `json:"workload"`
	Starters int    `json:"starters"`
	// ActivityMS is -activity-time; 0 (left out) for no-op activities.
	ActivityMS float64   `json:"activity_ms,omitempty"`
	Points     []w6Point `json:"points"`
}

func (r w6Result) name() string { return r.Workload }
func (r w6Result) rows() []row {
	var rows []row
	for _, p := range r.Points {
		rows = append(rows, row{
			fmt.Sprintf("%d workflows of 3 %s, %d engine process(es), started from another", p.Workflows, activities(r.ActivityMS), p.Processes),
			fmt.Sprintf("%s workflows/s (x%s), %s, %s transactions/step, %s ms CPU/workflow",
				num(p.Throughput), num(p.Speedup), p.latency.text(), num(p.CommitsPerStep), num(p.BusyCPU)),
		})
	}
	return rows
}

// activities names W1's and W6's activities in the table.
func activities(ms float64) string {
	if ms == 0 {
		return "no-op activities"
	}
	return fmt.Sprintf("activities of %s ms", num(ms))
}

// measureMemory returns the goroutine count and live heap after a full GC.
func measureMemory() (goroutines int, heap uint64) {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return runtime.NumGoroutine(), m.HeapAlloc
}

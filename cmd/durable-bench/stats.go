package main

import (
	"fmt"
	"math"
	"runtime"

	"github.com/durable-go/durable/internal/benchkit"
)

// result is what one workload measured: encoded as its JSON line, and
// shown as rows of the table.
type result interface {
	name() string
	rows() []row
}

type row struct{ what, figure string }

// head begins every JSON line: the store the workload ran on and its name,
// then, if some of it could not run there, what and why.
type head struct {
	Store    string `json:"store"`
	Workload string `json:"workload"`
	// Skipped is empty when the whole workload ran. Otherwise it is the
	// reason, after the fields it left out and a colon when only those
	// were skipped; a line skipped whole has no figure.
	Skipped string `json:"skipped,omitempty"`
	// why is the reason alone, for the table.
	why string
}

func (h head) name() string { return h.Workload }

// skip notes that fields (all of the workload, if empty) were not
// measured, for why.
func (h *head) skip(fields, why string) {
	h.why = why
	h.Skipped = why
	if fields != "" {
		h.Skipped = fields + ": " + why
	}
}

// skipped is the table's figure for a measure that was skipped.
func (h head) skipped() string { return "skipped: " + h.why }

// skippedResult is a workload that could not run on the store at all.
type skippedResult struct{ head }

func (r skippedResult) rows() []row { return []row{{"not run on " + r.Store, r.skipped()}} }

// latency is benchkit.Latency, which the peer benchmarks report too.
type latency = benchkit.Latency

// latencyText formats l for the table.
func latencyText(l latency) string {
	return fmt.Sprintf("p50 %s ms, p99 %s ms, p99.9 %s ms, max %s ms", num(l.P50), num(l.P99), num(l.P999), num(l.Max))
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
	// minus before; it includes the engines' start-up and shutdown. It and
	// CommitsPerStep are left out where there is no such count (SQLite).
	Commits        *int64   `json:"xact_commits,omitempty"`
	CommitsPerStep *float64 `json:"commits_per_step,omitempty"`
	// BusyCPU is the machine's busy CPU time (all processes, Postgres
	// included) per workflow, from /proc/stat; 0 where there is none.
	BusyCPU float64 `json:"busy_cpu_ms_per_workflow"`
}

// newLoadFigures returns the figures of lt, an open loop of workflows,
// without the commit count (see withCommits).
func newLoadFigures(workflows int, lt benchkit.Loop) loadFigures {
	return loadFigures{
		Workflows:  workflows,
		Seconds:    benchkit.Round(lt.Span.Seconds(), 3),
		Throughput: benchkit.Round(float64(workflows)/lt.Span.Seconds(), 1),
		latency:    benchkit.LatencyOf(lt.Lat),
		BusyCPU:    benchkit.Round(benchkit.MS(lt.Busy)/float64(workflows), 3),
	}
}

// withCommits returns f with the database's commits over the loop.
func (f loadFigures) withCommits(commits int64) loadFigures {
	perStep := benchkit.Round(float64(commits)/float64(f.Workflows*3), 3)
	f.Commits, f.CommitsPerStep = &commits, &perStep
	return f
}

// perStep is the table's figure of commits per step: "?" where there is
// no count.
func (f loadFigures) perStep() string {
	if f.CommitsPerStep == nil {
		return "?"
	}
	return num(*f.CommitsPerStep)
}

type w1Result struct {
	head
	Starters int `json:"starters"`
	// ActivityMS is -activity-time; 0 (left out) for no-op activities.
	ActivityMS float64 `json:"activity_ms,omitempty"`
	loadFigures
}

func (r w1Result) rows() []row {
	commits := r.skipped()
	if r.Commits != nil {
		commits = fmt.Sprintf("%s (%d commits)", num(*r.CommitsPerStep), *r.Commits)
	}
	return []row{
		{fmt.Sprintf("%d workflows of 3 %s, %d starters, in-process", r.Workflows, activities(r.ActivityMS), r.Starters),
			fmt.Sprintf("%s workflows/s (%s s)", num(r.Throughput), num(r.Seconds))},
		{"start to result", latencyText(r.latency)},
		{"transactions per activity step", commits},
		{"busy CPU per workflow, machine-wide", num(r.BusyCPU) + " ms"},
	}
}

type w2Result struct {
	head
	Runs      int     `json:"runs"`
	InProcess latency `json:"in_process"`
	// CrossProcess is left out where it cannot run (SQLite), and so is
	// CrossProcessListening: CrossProcess while another Result waits in
	// the starting process, so that its notification listener is up.
	CrossProcess          *latency `json:"cross_process,omitempty"`
	CrossProcessListening *latency `json:"cross_process_listening,omitempty"`
}

func (r w2Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d x start + result of a one-activity workflow, in the worker process", r.Runs), latencyText(r.InProcess)},
		{"the same from a process that does not run the engine", r.figure(r.CrossProcess)},
		{"the same while another Result waits in that process", r.figure(r.CrossProcessListening)},
	}
}

// figure is the table's figure for l, a latency that may have been skipped.
func (h head) figure(l *latency) string {
	if l == nil {
		return h.skipped()
	}
	return latencyText(*l)
}

type w3Result struct {
	head
	Runs         int     `json:"runs"`
	SleepMS      float64 `json:"sleep_ms"`
	StartSeconds float64 `json:"start_seconds"`
	Lateness     latency `json:"lateness"`
}

func (r w3Result) rows() []row {
	return []row{
		{fmt.Sprintf("%d runs sleeping %s ms: result seen - (start call + sleep)", r.Runs, num(r.SleepMS)), latencyText(r.Lateness)},
		{"time to start them all", num(r.StartSeconds) + " s"},
	}
}

type w4Result struct {
	head
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

func (r w4Result) rows() []row {
	return []row{
		{fmt.Sprintf("replay %d events from memory, cold / median of 5 more", r.Events), fmt.Sprintf("%s ms / %s ms", num(r.MemoryColdMS), num(r.MemoryMS))},
		{fmt.Sprintf("import a %s KB file and replay it", num(float64(r.FileBytes)/1024)), num(r.FileMS) + " ms"},
		{fmt.Sprintf("replay a recorded run of %d events from the database", r.DatabaseEvents), num(r.DatabaseMS) + " ms"},
		{fmt.Sprintf("one step of that run, cached (%d steps, %s s)", r.Steps, num(r.RecordedSeconds)), latencyText(r.Step)},
		{"step p50: first tenth / last tenth of the run", fmt.Sprintf("%s ms / %s ms", num(r.StepFirstTenth), num(r.StepLastTenth))},
	}
}

type w5Result struct {
	head
	Runs             int     `json:"runs"`
	GoroutinesAdded  int     `json:"goroutines_added"`
	HeapBytesPerRun  float64 `json:"heap_bytes_per_run"`
	DBBytesPerRun    float64 `json:"db_bytes_per_run"`
	SleepingRunsPerS float64 `json:"runs_put_to_sleep_per_s"`
}

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
	head
	Starters int `json:"starters"`
	// ActivityMS is -activity-time; 0 (left out) for no-op activities.
	ActivityMS float64   `json:"activity_ms,omitempty"`
	Points     []w6Point `json:"points"`
}

func (r w6Result) rows() []row {
	var rows []row
	for _, p := range r.Points {
		rows = append(rows, row{
			fmt.Sprintf("%d workflows of 3 %s, %d engine process(es), started from another", p.Workflows, activities(r.ActivityMS), p.Processes),
			fmt.Sprintf("%s workflows/s (x%s), %s, %s transactions/step, %s ms CPU/workflow",
				num(p.Throughput), num(p.Speedup), latencyText(p.latency), p.perStep(), num(p.BusyCPU)),
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

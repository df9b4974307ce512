package chaos

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is what one run of the rig tried and what held.
type Report struct {
	Findings
	Elapsed time.Duration `json:"elapsed"`
	Seed    uint64        `json:"seed"`
	Workers int           `json:"workers"`
	// ClockSkews are the worker slots' clock skews.
	ClockSkews []time.Duration `json:"clock_skews,omitempty"`
	// Dir holds the logs of the run.
	Dir string `json:"dir"`

	// Faults injected. KillAlls counts the times all workers were killed at
	// once, KillAllProcesses the processes those killed.
	Kills            int `json:"kills"`
	KillAlls         int `json:"kill_alls"`
	KillAllProcesses int `json:"kill_all_processes"`
	Pauses           int `json:"pauses"`
	TargetedPauses   int `json:"targeted_pauses"`
	PGRestarts       int `json:"postgres_restarts"`
	PGStopsFast      int `json:"postgres_stops_fast"`
	PGStopsImmediate int `json:"postgres_stops_immediate"`
	ConnKills        int `json:"connection_kill_rounds"`
	// ConnectionsKilled counts the backends pg_terminate_backend ended.
	ConnectionsKilled int `json:"connections_killed"`
	// Upgrades counts the worker processes killed and started again on
	// the second generation of the workflow code.
	Upgrades int `json:"upgrades"`

	// What the driver saw. WrongKeySignals are the signals sent from the
	// engine whose payload key is wrong, WrongKeyRefused those it refused
	// (with an example of its error), WrongKeyAccepted those it did not.
	WrongKeySignals        int    `json:"wrong_key_signals"`
	WrongKeyRefused        int    `json:"wrong_key_refused"`
	WrongKeyAccepted       int    `json:"wrong_key_accepted"`
	WrongKeyRefusalExample string `json:"wrong_key_refusal_example,omitempty"`
	// SpinRuns are the runs of code that never yields the driver started,
	// SpinDeadlocksSeen those whose task error showed the deadlock,
	// SpinsTerminated those it terminated; DeadlockTaskFailures the Error
	// lines the workers logged for their tasks.
	SpinRuns             int `json:"spin_runs"`
	SpinDeadlocksSeen    int `json:"spin_deadlocks_seen"`
	SpinsTerminated      int `json:"spins_terminated"`
	DeadlockTaskFailures int `json:"deadlock_task_failures"`
	// StarvedDeadlocks counts the deadlock errors of workflows whose code
	// yields: a process starved of CPU (by the spinning code, the race
	// detector) did not run it within the deadlock timeout. The task is
	// retried; reported, not a violation.
	StarvedDeadlocks       int    `json:"starved_deadlocks"`
	StarvedDeadlockExample string `json:"starved_deadlock_example,omitempty"`

	// StaleWrites are the writes fencing refused, counted from the workers'
	// log lines, by write; ZombieWritesRejected those a paused worker made
	// once resumed. StaleMetricOfStopped is what the workers that
	// stopped gracefully reported from durable_stale_writes_rejected_total
	// at exit; StaleLogOfStopped their log lines, for comparison.
	StaleWrites          int            `json:"stale_writes_rejected"`
	ZombieWritesRejected int            `json:"zombie_writes_rejected"`
	StaleByWrite         map[string]int `json:"stale_writes_by_write"`
	StaleMetricOfStopped int            `json:"stale_metric_of_stopped_workers"`
	StaleLogOfStopped    int            `json:"stale_log_of_stopped_workers"`

	// ClientRetries counts the driver's calls (start, signal) that failed
	// and were tried again. ResultWaitErrors counts Run.Result calls that
	// returned a database error instead of waiting on.
	ClientRetries          int    `json:"client_retries"`
	ResultWaitErrors       int    `json:"result_wait_errors"`
	ResultWaitErrorExample string `json:"result_wait_error_example,omitempty"`
	// LogLines the workers wrote; RetryLogLines those about background
	// loops failing to reach the database; EngineErrors those at Error.
	LogLines      int `json:"log_lines"`
	RetryLogLines int `json:"retry_log_lines"`
	EngineErrors  int `json:"engine_errors"`
	// EngineErrorsFromDB counts Error lines whose error is the database
	// going away: Error should mean an operator must act, and a killed
	// connection does not call for that (reported, not a violation).
	EngineErrorsFromDB       int    `json:"engine_errors_from_db_faults"`
	EngineErrorFromDBExample string `json:"engine_error_from_db_example,omitempty"`
}

// OK reports whether nothing was lost: no violations.
func (r *Report) OK() bool { return len(r.Violations) == 0 }

// Table returns the report as a table for people.
func (r *Report) Table() string {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("elapsed", r.Elapsed.Round(time.Second))
	row("seed", r.Seed)
	skews := fmt.Sprint(r.ClockSkews)
	row("worker processes (clock skews)", fmt.Sprintf("%d %s", r.Workers, skews))
	row("workflows", fmt.Sprintf("%d %s", r.Workflows, byKey(r.Kinds)))
	row("runs", r.Runs)
	row("activity executions (ledger)", r.Executions)
	row("timers fired", r.TimersFired)
	fmt.Fprintln(tw, "-- faults injected\t")
	row("worker kills (one)", r.Kills)
	row("worker kills (all at once)", fmt.Sprintf("%d (%d processes)", r.KillAlls, r.KillAllProcesses))
	row("pauses past the lease", fmt.Sprintf("%d (%d holding claims)", r.Pauses, r.TargetedPauses))
	row("postgres restarts", fmt.Sprintf("%d (%d fast, %d immediate)", r.PGRestarts, r.PGStopsFast, r.PGStopsImmediate))
	row("connections killed", fmt.Sprintf("%d (in %d rounds)", r.ConnectionsKilled, r.ConnKills))
	row("worker processes upgraded mid-run", r.Upgrades)
	row("signals from an engine with the wrong key", fmt.Sprintf("%d (%d refused)", r.WrongKeySignals, r.WrongKeyRefused))
	row("runs of code that never yields", fmt.Sprintf("%d (%d deadlocks seen, %d terminated)", r.SpinRuns, r.SpinDeadlocksSeen, r.SpinsTerminated))
	fmt.Fprintln(tw, "-- what held\t")
	row("writes checked from the database", fmt.Sprintf("%d outcomes, %d heartbeats, %d commits, %d claims", r.OutcomesChecked, r.HeartbeatsChecked, r.CommitsChecked, r.ClaimsChecked))
	row("stale writes refused (workers' log lines)", fmt.Sprintf("%d %s", r.StaleWrites, byKey(r.StaleByWrite)))
	row("  of them from resumed zombies", r.ZombieWritesRejected)
	row("  counter / log lines of stopped workers", fmt.Sprintf("%d / %d", r.StaleMetricOfStopped, r.StaleLogOfStopped))
	dup := "duplicate executions"
	if r.Unexplained == 0 {
		dup += " (all explained)"
	} else {
		dup += fmt.Sprintf(" (%d unexplained)", r.Unexplained)
	}
	row(dup, fmt.Sprintf("%d %s", r.DuplicateExecutions, byKey(r.Explained)))
	row("exactly-once deliveries absorbed", r.ExactlyOnceAbsorbed)
	row("signals delivered twice (client retry)", r.SignalsDeliveredTwice)
	row("signals accepted during closing tasks, counted", fmt.Sprintf("%d (%d refused: run closed)", r.SignalsAccepted-r.LostSignals, r.SignalsRefusedClosed))
	row("runs failed with NUL / invalid UTF-8 text escaped", fmt.Sprintf("%d (%d more failed by faults first)", r.BadTextRuns, r.BadTextLostToFaults))
	row("versioned runs (new branch, upgraded mid-run)", fmt.Sprintf("%d (%d, %d)", r.VersionedRuns, r.NewBranchRuns, r.UpgradedMidRun))
	row("never-yielding runs terminated clean", r.SpinRunsChecked-r.SpinViolations)
	row("driver retries / Result wait errors", fmt.Sprintf("%d / %d", r.ClientRetries, r.ResultWaitErrors))
	row("worker log lines (db retry lines)", fmt.Sprintf("%d (%d)", r.LogLines, r.RetryLogLines))
	row("Error lines caused by db faults", r.EngineErrorsFromDB)
	row("deadlock errors of code that yields (starved)", r.StarvedDeadlocks)
	fmt.Fprintln(tw, "-- losses (want 0)\t")
	row("lost", r.Lost)
	row("duplicate effects unexplained", r.Unexplained)
	row("history gaps", r.HistoryGaps)
	row("replay failures", r.ReplayFailures)
	row("double completions", r.DoubleCompletions)
	row("early timer fires", r.EarlyTimerFires)
	row("double timer fires", r.DoubleTimerFires)
	row("exactly-once violations", r.ExactlyOnceViolations)
	row("lost signals", r.LostSignals)
	row("SignalWithStart signals the first task missed", r.FirstSignalMissed)
	row("wrong-key signals accepted / undecodable in history", fmt.Sprintf("%d / %d", r.WrongKeyAccepted, r.UndecodableSignals))
	row("failures not recorded escaped", r.BadTextViolations)
	row("never-yielding runs with writes", r.SpinViolations)
	row("versioned runs wrong", r.VersionViolations)
	row("stale writes accepted (database)", r.StaleAccepted)
	row("claims of a live lease or early retry", r.EarlyClaims)
	row("timers off the database clock", r.TimerClockViolations)
	row("left claimed or ready", r.Leftover)
	row("violations", len(r.Violations))
	tw.Flush()
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "VIOLATION: %s\n", v)
	}
	fmt.Fprintf(&b, "logs: %s\n", r.Dir)
	return b.String()
}

func byKey[K ~string](m map[K]int) string {
	if len(m) == 0 {
		return ""
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %d", k, m[k]))
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// JSON returns the report as one line of JSON.
func (r *Report) JSON() string {
	type out struct {
		*Report
		Elapsed    float64 `json:"elapsed_seconds"`
		Violations int     `json:"violations"`
	}
	b, err := json.Marshal(out{Report: r, Elapsed: r.Elapsed.Seconds(), Violations: len(r.Violations)})
	if err != nil {
		return fmt.Sprintf(`{"error":%q}`, err.Error())
	}
	return string(b)
}

package main

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/durable-go/durable/internal/store"
	"github.com/spf13/cobra"
)

// statsOutput is the --json form of stats. Ages and durations are in
// seconds; a time or age is null where there is nothing to measure.
type statsOutput struct {
	// Now is the database's clock, which ages are measured against.
	Now           time.Time               `json:"now"`
	WindowSeconds float64                 `json:"window_seconds"`
	Queues        []queueStatsOutput      `json:"queues"`
	DeadLetters   []deadLetterStatsOutput `json:"dead_letters"`
	Activities    []activityStatsOutput   `json:"activities"`
	// ActivitiesSince is when the activities counted start: now minus the
	// window, or, when ActivitiesCapped, the time of the oldest outcome
	// counted (--max-outcomes were read, the latest first).
	ActivitiesSince  time.Time `json:"activities_since"`
	ActivitiesCapped bool      `json:"activities_capped"`
}

type taskStatsOutput struct {
	Ready   int `json:"ready"`
	Running int `json:"running"`
	Waiting int `json:"waiting"`
	// OldestReadyAt is when the longest-waiting ready task became ready.
	OldestReadyAt         *time.Time `json:"oldest_ready_at"`
	OldestReadyAgeSeconds *float64   `json:"oldest_ready_age_seconds"`
}

type queueStatsOutput struct {
	Queue         string          `json:"queue"`
	WorkflowTasks taskStatsOutput `json:"workflow_tasks"`
	ActivityTasks taskStatsOutput `json:"activity_tasks"`
	TimersPending int             `json:"timers_pending"`
	NextTimerAt   *time.Time      `json:"next_timer_at"`
}

type deadLetterStatsOutput struct {
	Kind    string `json:"kind"`
	Pending int    `json:"pending"`
	// OldestAt is when the oldest pending one was dead-lettered.
	OldestAt         *time.Time `json:"oldest_at"`
	OldestAgeSeconds *float64   `json:"oldest_age_seconds"`
}

type activityStatsOutput struct {
	Activity  string `json:"activity"`
	Completed int    `json:"completed"`
	Failed    int    `json:"failed"`
	// FailureRate is failed / (completed + failed), from 0 to 1.
	FailureRate float64 `json:"failure_rate"`
	// The durations, scheduled to completed, are of the completed ones:
	// null when none completed.
	MeanSeconds *float64 `json:"mean_seconds"`
	P50Seconds  *float64 `json:"p50_seconds"`
	P95Seconds  *float64 `json:"p95_seconds"`
}

func (a *app) statsCommand() *cobra.Command {
	var (
		window      string
		maxOutcomes int
	)
	cmd := &cobra.Command{
		Use:   "stats",
		Short: "Show queue backlogs, timers, dead letters and activity outcomes",
		Long: `stats prints what the engine's workers face, as of the database's clock:

  per queue, workflow and activity tasks ready (due, waiting for a worker;
  a task whose lease ran out is ready again), running (claimed, lease held)
  and waiting (due later: delayed jobs, activities waiting to retry), and how
  long the oldest ready task has waited; timers not yet fired and when the
  next one fires;

  dead letters not yet redriven, per kind, and the age of the oldest;

  per activity type, the activities in workflows that ended within --window:
  how many completed and how many failed for good (retries spent or a
  permanent error), the failure rate, and the mean, median and 95th
  percentile time from scheduled to completed, retries included. Standalone
  jobs keep no history, so they are not counted here; those that fail for
  good are dead letters. It reads the latest --max-outcomes of them at most,
  so that its cost does not grow with the window; when the window holds
  more, it says since when it counted.

It only reads. --json prints ages and durations in seconds.`,
		Example: `  durable stats
  durable stats --window 24h --json
  durable stats --window 7d --max-outcomes 500000`,
		Args: cobra.NoArgs,
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			win, err := parseWindow(window)
			if err != nil {
				return err
			}
			if maxOutcomes <= 0 {
				return usageError("--max-outcomes %d: want a positive number", maxOutcomes)
			}
			ctx := cmd.Context()
			s, err := a.store(ctx)
			if err != nil {
				return err
			}
			now, err := s.Now(ctx)
			if err != nil {
				return err
			}
			queues, err := s.QueueStats(ctx, now)
			if err != nil {
				return err
			}
			dead, err := s.DeadLetterStats(ctx)
			if err != nil {
				return err
			}
			acts, err := s.ActivityStats(ctx, store.ActivityStatsParams{Since: now.Add(-win), Limit: maxOutcomes})
			if err != nil {
				return err
			}
			out := statsOut(now, win, queues, dead, acts)
			if a.json {
				return writeJSON(cmd.OutOrStdout(), out)
			}
			return printStats(cmd.OutOrStdout(), out, window)
		}),
	}
	cmd.Flags().StringVar(&window, "window", "1h", "count the activities that ended this long ago or since (90m, 24h, 7d)")
	cmd.Flags().IntVar(&maxOutcomes, "max-outcomes", 50_000, "read at most this many activity outcomes of the window, the latest first")
	return cmd
}

// maxDays is the most days a time.Duration holds (about 292 years): a
// number of days in a flag beyond it would overflow.
const maxDays = int(math.MaxInt64 / (24 * time.Hour))

// parseWindow parses --window: a positive duration, or a number of days.
func parseWindow(s string) (time.Duration, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		if n, err := strconv.Atoi(days); err == nil && n > 0 && n <= maxDays {
			return time.Duration(n) * 24 * time.Hour, nil
		}
	}
	if d, err := time.ParseDuration(s); err == nil && d > 0 {
		return d, nil
	}
	return 0, usageError("--window %q: want a positive duration (90m, 24h, 7d)", s)
}

func statsOut(now time.Time, win time.Duration, queues []store.QueueStats, dead []store.DeadLetterStats, acts store.ActivityReport) statsOutput {
	age := func(t *time.Time) *float64 {
		if t == nil {
			return nil
		}
		s := max(now.Sub(*t), 0).Seconds()
		return &s
	}
	tasks := func(t store.TaskStats) taskStatsOutput {
		return taskStatsOutput{
			Ready: t.Ready, Running: t.Running, Waiting: t.Waiting,
			OldestReadyAt: t.OldestReady, OldestReadyAgeSeconds: age(t.OldestReady),
		}
	}
	out := statsOutput{
		Now: now, WindowSeconds: win.Seconds(),
		Queues: []queueStatsOutput{}, DeadLetters: []deadLetterStatsOutput{}, Activities: []activityStatsOutput{},
		ActivitiesSince: acts.Since, ActivitiesCapped: acts.Capped,
	}
	for _, q := range queues {
		out.Queues = append(out.Queues, queueStatsOutput{
			Queue: q.Queue, WorkflowTasks: tasks(q.WorkflowTasks), ActivityTasks: tasks(q.ActivityTasks),
			TimersPending: q.Timers, NextTimerAt: q.NextTimer,
		})
	}
	for _, d := range dead {
		out.DeadLetters = append(out.DeadLetters, deadLetterStatsOutput{
			Kind: d.Kind, Pending: d.Pending, OldestAt: d.OldestPending, OldestAgeSeconds: age(d.OldestPending),
		})
	}
	for _, act := range acts.Activities {
		o := activityStatsOutput{Activity: act.Activity, Completed: act.Completed, Failed: act.Failed}
		if n := act.Completed + act.Failed; n > 0 {
			o.FailureRate = float64(act.Failed) / float64(n)
		}
		if act.Completed > 0 {
			secs := func(d time.Duration) *float64 { s := d.Seconds(); return &s }
			o.MeanSeconds, o.P50Seconds, o.P95Seconds = secs(act.Mean), secs(act.P50), secs(act.P95)
		}
		out.Activities = append(out.Activities, o)
	}
	return out
}

func printStats(w io.Writer, s statsOutput, window string) error {
	fmt.Fprintf(w, "As of %s (database clock)\n", formatTime(s.Now))
	if len(s.Queues) == 0 {
		fmt.Fprintln(w, "\nQueues: no tasks or timers")
	} else if err := printQueues(w, s); err != nil {
		return err
	}

	fmt.Fprintln(w, "\nDead letters not yet redriven")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  KIND\tPENDING\tOLDEST")
	for _, d := range s.DeadLetters {
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", d.Kind, d.Pending, ageOf(d.OldestAgeSeconds))
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	switch {
	case len(s.Activities) == 0:
		_, err := fmt.Fprintf(w, "\nActivities: none ended in the last %s\n", clean(window))
		return err
	case s.ActivitiesCapped:
		fmt.Fprintf(w, "\nActivities that ended in the last %s: the latest outcomes only, since %s (%s ago; --max-outcomes reads more)\n",
			clean(window), formatTime(s.ActivitiesSince), formatDuration(s.Now.Sub(s.ActivitiesSince)))
	default:
		fmt.Fprintf(w, "\nActivities that ended in the last %s\n", clean(window))
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ACTIVITY\tCOMPLETED\tFAILED\tFAILURE RATE\tMEAN\tP50\tP95")
	for _, act := range s.Activities {
		fmt.Fprintf(tw, "  %s\t%d\t%d\t%.1f%%\t%s\t%s\t%s\n", clean(act.Activity), act.Completed, act.Failed,
			100*act.FailureRate, ageOf(act.MeanSeconds), ageOf(act.P50Seconds), ageOf(act.P95Seconds))
	}
	return tw.Flush()
}

func printQueues(w io.Writer, s statsOutput) error {
	for _, section := range []struct {
		title string
		tasks func(q queueStatsOutput) taskStatsOutput
	}{
		{"Workflow tasks", func(q queueStatsOutput) taskStatsOutput { return q.WorkflowTasks }},
		{"Activity tasks", func(q queueStatsOutput) taskStatsOutput { return q.ActivityTasks }},
	} {
		fmt.Fprintf(w, "\n%s\n", section.title)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  QUEUE\tREADY\tRUNNING\tWAITING\tOLDEST READY")
		for _, q := range s.Queues {
			t := section.tasks(q)
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%s\n", clean(q.Queue), t.Ready, t.Running, t.Waiting, ageOf(t.OldestReadyAgeSeconds))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "\nTimers")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  QUEUE\tPENDING\tNEXT FIRES")
	for _, q := range s.Queues {
		next := "-"
		if q.NextTimerAt != nil {
			next = formatTime(*q.NextTimerAt) + " (" + relative(*q.NextTimerAt, s.Now) + ")"
		}
		fmt.Fprintf(tw, "  %s\t%d\t%s\n", clean(q.Queue), q.TimersPending, next)
	}
	return tw.Flush()
}

// ageOf formats a number of seconds as a duration, or "-" for none.
func ageOf(secs *float64) string {
	if secs == nil {
		return "-"
	}
	return formatDuration(time.Duration(*secs * float64(time.Second)))
}

// formatDuration rounds d for people: to the microsecond below a
// millisecond, to the millisecond below a minute, else to the second.
func formatDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
)

// activityOutput is the --json form of what complete and fail did.
type activityOutput struct {
	// Done is "complete" or "fail".
	Done       string `json:"done"`
	WorkflowID string `json:"workflow_id,omitempty"`
	ActivityID int64  `json:"activity_id,omitempty"`
}

// activityTarget is the attempt a command acts on: by --token, or by
// --workflow-id and --activity-id.
type activityTarget struct {
	token      string
	workflowID string
	activityID int64
}

func (t *activityTarget) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&t.token, "token", "", "the attempt's task token (activity.GetInfo(ctx).TaskToken)")
	f.StringVar(&t.workflowID, "workflow-id", "", "the workflow ID of the activity's run, with --activity-id")
	f.Int64Var(&t.activityID, "activity-id", 0, "the activity's ID in its run (activity.Info.Seq), with --workflow-id")
}

// check says whether the flags name one attempt.
func (t *activityTarget) check(cmd *cobra.Command) error {
	byToken, byID := cmd.Flags().Changed("token"), cmd.Flags().Changed("workflow-id") || cmd.Flags().Changed("activity-id")
	switch {
	case byToken && byID:
		return usageError("give --token, or --workflow-id and --activity-id, not both")
	case byToken && strings.TrimSpace(t.token) == "":
		return usageError("--token is empty")
	case byToken:
		return nil
	case t.workflowID == "" || t.activityID <= 0:
		return usageError("name the activity: --token, or --workflow-id and --activity-id (a number from 1)")
	}
	return nil
}

func (a *app) activityCommand() *cobra.Command {
	cmd := groupCommand("activity", "Complete or fail activities whose result comes later",
		`An activity that returns activity.ErrResultPending waits for its result
from elsewhere: complete and fail give it, by the attempt's task token or by
the workflow ID and the activity's ID (activity.Info.Seq). Each attempt takes
one outcome: a second, or one for an attempt that timed out, exits 3.`)
	cmd.AddCommand(a.activityCompleteCommand(), a.activityFailCommand())
	return cmd
}

func (a *app) activityCompleteCommand() *cobra.Command {
	var (
		t                  activityTarget
		result, resultFile string
	)
	cmd := &cobra.Command{
		Use:   "complete",
		Short: "Give a pending activity its result",
		Long: `complete records the result of an activity attempt that waits for it (the
activity returned activity.ErrResultPending), and wakes its workflow. The
result is JSON, from --result or the file --result-file names (/dev/stdin
reads standard input); without either it is null.`,
		Example: `  durable activity complete --token dt1.eyJy... --result '{"approved": true}'
  durable activity complete --workflow-id expense-42 --activity-id 1 --result '"APPROVED"'`,
		Args: exactArgs(0, "no arguments"),
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if err := t.check(cmd); err != nil {
				return err
			}
			v, err := readJSONFlag(cmd, "result", result, resultFile)
			if err != nil {
				return err
			}
			return a.activityControl(cmd, t, "complete", func(ctx context.Context, e *engine.Engine) error {
				if t.token != "" {
					return engine.CompleteActivity(ctx, e, []byte(t.token), v)
				}
				return engine.CompleteActivityByID(ctx, e, t.workflowID, t.activityID, v)
			})
		}),
	}
	t.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&result, "result", "", "the activity's result, as JSON (default null)")
	f.StringVar(&resultFile, "result-file", "", "read the activity's result, as JSON, from this file")
	return cmd
}

func (a *app) activityFailCommand() *cobra.Command {
	var (
		t            activityTarget
		message      string
		nonRetryable bool
	)
	cmd := &cobra.Command{
		Use:   "fail",
		Short: "Fail a pending activity's attempt",
		Long: `fail records the failure of an activity attempt that waits for its result, as
if the attempt had returned an error with --message: the activity is retried
per its retry policy, or, with --non-retryable or no attempts left, fails for
good and its workflow sees the failure.`,
		Example: `  durable activity fail --token dt1.eyJy... --message "expense rejected" --non-retryable
  durable activity fail --workflow-id expense-42 --activity-id 1 --message "approver unreachable"`,
		Args: exactArgs(0, "no arguments"),
		RunE: action(func(cmd *cobra.Command, _ []string) error {
			if err := t.check(cmd); err != nil {
				return err
			}
			if strings.TrimSpace(message) == "" {
				return usageError("--message must not be empty: say why the activity failed")
			}
			cause := errors.New(message)
			if nonRetryable {
				cause = activity.Permanent(cause)
			}
			return a.activityControl(cmd, t, "fail", func(ctx context.Context, e *engine.Engine) error {
				if t.token != "" {
					return engine.FailActivity(ctx, e, []byte(t.token), cause)
				}
				return engine.FailActivityByID(ctx, e, t.workflowID, t.activityID, cause)
			})
		}),
	}
	t.flags(cmd)
	f := cmd.Flags()
	f.StringVar(&message, "message", "", "why the attempt failed (required)")
	f.BoolVar(&nonRetryable, "non-retryable", false, "fail the activity for good, whatever its retry policy")
	return cmd
}

// activityControl connects, runs fn on an engine that runs no workers, and
// prints what was done.
func (a *app) activityControl(cmd *cobra.Command, t activityTarget, done string, fn func(context.Context, *engine.Engine) error) error {
	ctx := cmd.Context()
	s, err := a.store(ctx)
	if err != nil {
		return err
	}
	e, err := a.clientEngine(ctx)
	if err != nil {
		return err
	}
	if err := fn(ctx, e); err != nil {
		if errors.Is(err, engine.ErrActivityNotFound) {
			return notFound("%v: see 'durable workflow describe' for its pending activities", err)
		}
		if t.workflowID != "" {
			return noOpenRun(ctx, s, t.workflowID, err)
		}
		return err
	}
	if a.json {
		return writeJSON(cmd.OutOrStdout(), activityOutput{Done: done, WorkflowID: t.workflowID, ActivityID: t.activityID})
	}
	what := "the activity"
	if t.workflowID != "" {
		what = fmt.Sprintf("activity %d of workflow %s", t.activityID, clean(t.workflowID))
	}
	msg := what + ": completed; its workflow picks the result up"
	if done == "fail" {
		msg = what + ": attempt failed; it is retried or fails for good per its retry policy"
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
	return err
}

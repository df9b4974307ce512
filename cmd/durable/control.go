package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/store"
)

// maxSignalName is the longest signal name the engine accepts, in bytes.
const maxSignalName = 200

// controlOutput is the --json form of what signal, cancel and terminate did.
type controlOutput struct {
	WorkflowID string `json:"workflow_id"`
	// Done is "signal", "cancel" or "terminate".
	Done string `json:"done"`
}

// addWorkflowControl adds the commands that change an open run to the
// workflow group, and says so in the group's help.
func (a *app) addWorkflowControl(wf *cobra.Command) {
	wf.Short = "List, inspect, signal, cancel and terminate workflow runs"
	wf.Long += `

signal, cancel and terminate act on the workflow ID's open run. They write to
the database only: the workers pick the change up (terminate needs no worker).
A workflow ID with no run exits 3; one whose runs have all closed exits 1.`
	wf.AddCommand(a.workflowSignalCommand(), a.workflowCancelCommand(), a.workflowTerminateCommand())
}

func (a *app) workflowSignalCommand() *cobra.Command {
	var payload, payloadFile string
	cmd := &cobra.Command{
		Use:   "signal WORKFLOW_ID SIGNAL_NAME",
		Short: "Send a signal to a workflow's open run",
		Long: `signal sends a signal named SIGNAL_NAME to the open run of WORKFLOW_ID, for
workflow code that reads it with workflow.GetSignalChannel. Signals are
recorded in the run's history: delivered in the order sent, and never lost,
whether or not the workflow waits for the signal yet.

The payload is JSON, from --payload or the file --payload-file names
(/dev/stdin reads standard input); without either it is null. A string
payload is quoted as JSON: --payload '"approved"'. Payloads may hold personal
data; this command does not print them.`,
		Example: `  durable workflow signal order-1 approve --payload '{"by": "ada"}'
  durable workflow signal order-1 approve --payload-file approval.json
  durable workflow signal order-1 wake --json`,
		Args: exactArgs(2, "a workflow ID and a signal name"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id, name := args[0], args[1]
			if name == "" || len(name) > maxSignalName {
				return usageError("signal name %q: want 1 to %d bytes", name, maxSignalName)
			}
			v, err := readPayload(cmd, payload, payloadFile)
			if err != nil {
				return err
			}
			return a.control(cmd, id, "signal", func(ctx context.Context, e *engine.Engine) error {
				return engine.Signal(ctx, e, id, name, v)
			}, fmt.Sprintf("workflow %s: signal %s sent", clean(id), clean(name)))
		}),
	}
	f := cmd.Flags()
	f.StringVar(&payload, "payload", "", "the signal's payload, as JSON (default null)")
	f.StringVar(&payloadFile, "payload-file", "", "read the signal's payload, as JSON, from this file")
	return cmd
}

// readPayload returns the signal payload that --payload or --payload-file
// gives, or null; anything but one JSON value is a usage error.
func readPayload(cmd *cobra.Command, payload, file string) (json.RawMessage, error) {
	return readJSONFlag(cmd, "payload", payload, file)
}

// readJSONFlag returns the JSON value that --name or --name-file gives
// (arg and file are their values), or null; anything but one JSON value
// is a usage error.
func readJSONFlag(cmd *cobra.Command, name, arg, file string) (json.RawMessage, error) {
	fromArg, fromFile := cmd.Flags().Changed(name), cmd.Flags().Changed(name+"-file")
	var (
		b    []byte
		flag string
	)
	switch {
	case fromArg && fromFile:
		return nil, usageError("give --%s or --%s-file, not both", name, name)
	case fromArg:
		b, flag = []byte(arg), "--"+name
	case fromFile:
		var err error
		if b, err = os.ReadFile(file); err != nil {
			return nil, usageError("--%s-file: %v", name, err)
		}
		flag = "--" + name + "-file " + clean(file)
	default:
		return json.RawMessage("null"), nil
	}
	var v json.RawMessage
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, usageError("%s is not valid JSON (%v): quote a string as JSON, as in --%s '\"yes\"'", flag, err, name)
	}
	return v, nil
}

func (a *app) workflowCancelCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "cancel WORKFLOW_ID",
		Short: "Ask a workflow's open run to cancel",
		Long: `cancel asks the open run of WORKFLOW_ID to cancel, and records the request and
its reason in the run's history. Its pending activities and timers fail with
workflow.ErrCanceled (running activities learn of it at their next
heartbeat); the workflow code may clean up before it returns, and the run
then ends as canceled. 'durable workflow describe' shows when it has.

To stop a run at once, running none of its code, use terminate.`,
		Example: `  durable workflow cancel order-1 --reason "customer withdrew the order"
  durable workflow cancel order-1 --json`,
		Args: exactArgs(1, "one workflow ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !cmd.Flags().Changed("reason") {
				reason = defaultReason()
			}
			return a.control(cmd, id, "cancel", func(ctx context.Context, e *engine.Engine) error {
				return e.Cancel(ctx, id, reason)
			}, fmt.Sprintf("workflow %s: cancel requested: the run ends as canceled once its workflow code returns", clean(id)))
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why the run is canceled, recorded in its history (default "by $USER from the durable CLI")`)
	return cmd
}

func (a *app) workflowTerminateCommand() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "terminate WORKFLOW_ID",
		Short: "Stop a workflow's open run at once, running none of its code",
		Long: `terminate stops the open run of WORKFLOW_ID at once: the run closes as
terminated, with the reason in its history and failure, and its pending
activities and timers are dropped. No workflow code runs, so nothing cleans
up; an activity attempt already running is not waited for, and its outcome
is dropped. A parent workflow sees its child fail; the run's own children
are handled by their parent-close policy.

To let the workflow clean up, use cancel.`,
		Example: `  durable workflow terminate order-1 --reason "stuck on a bad deploy"
  durable workflow terminate order-1 --json`,
		Args: exactArgs(1, "one workflow ID"),
		RunE: action(func(cmd *cobra.Command, args []string) error {
			id := args[0]
			if !cmd.Flags().Changed("reason") {
				reason = defaultReason()
			}
			if strings.TrimSpace(reason) == "" {
				return usageError("--reason must not be empty: say why the run is terminated")
			}
			return a.control(cmd, id, "terminate", func(ctx context.Context, e *engine.Engine) error {
				return e.Terminate(ctx, id, reason)
			}, fmt.Sprintf("workflow %s: terminated", clean(id)))
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why the run is terminated, recorded in its history (default "by $USER from the durable CLI")`)
	return cmd
}

// defaultReason is the reason a cancel or terminate records when --reason
// is not given: who asked, and how.
func defaultReason() string {
	name := os.Getenv("USER")
	if name == "" {
		if u, err := user.Current(); err == nil {
			name = u.Username
		}
	}
	if name == "" {
		return "from the durable CLI"
	}
	return "by " + name + " from the durable CLI"
}

// control connects, runs fn on an engine that runs no workers, and prints
// what was done: done for --json, msg for people.
func (a *app) control(cmd *cobra.Command, workflowID, done string, fn func(context.Context, *engine.Engine) error, msg string) error {
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
		return noOpenRun(ctx, s, workflowID, err)
	}
	if a.json {
		return writeJSON(cmd.OutOrStdout(), controlOutput{WorkflowID: workflowID, Done: done})
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
	return err
}

// noOpenRun explains err if it says workflowID has no open run: exit code 3
// if the ID has no run at all, 1 with the last run's status if they have
// all closed. Other errors are returned as they are.
func noOpenRun(ctx context.Context, s store.Store, workflowID string, err error) error {
	switch {
	case errors.Is(err, engine.ErrRunNotFound):
		return notFound("no workflow with ID %q: find workflow IDs with 'durable workflow list'", workflowID)
	case errors.Is(err, engine.ErrRunClosed):
		r, rerr := s.GetRunByWorkflowID(ctx, workflowID)
		if rerr != nil {
			return fmt.Errorf("workflow %q has no open run", workflowID)
		}
		return fmt.Errorf("workflow %q has no open run: its last run is %s (see 'durable workflow describe %q')",
			workflowID, r.Status, workflowID)
	}
	return err
}

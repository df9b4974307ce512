package engine

// Status is a run's state, as RunInfo.Status reports it. A run is running
// until it closes, and then it is in one of the other five states for good.
type Status string

// Run statuses. The values are those the database stores and the durable
// CLI prints.
const (
	// StatusRunning is an open run: its workflow code has more to do.
	StatusRunning Status = "running"
	// StatusCompleted is a run whose workflow function returned a result.
	StatusCompleted Status = "completed"
	// StatusFailed is a run whose workflow function returned an error (or
	// whose input or result could not be decoded or stored).
	StatusFailed Status = "failed"
	// StatusCanceled is a run that was asked to cancel (Engine.Cancel) and
	// returned a canceled error.
	StatusCanceled Status = "canceled"
	// StatusTerminated is a run closed from outside (Engine.Terminate),
	// wherever its code was.
	StatusTerminated Status = "terminated"
	// StatusContinuedAsNew is a run that ended by starting the next run of
	// its workflow ID (workflow.NewContinueAsNewError).
	StatusContinuedAsNew Status = "continued_as_new"
)

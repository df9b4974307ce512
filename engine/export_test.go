package engine

// SetWorkflowTaskHook installs fn, called as a workflow task starts (enter
// true) and ends (false), so tests can check that no two tasks of one run
// overlap. It returns a function that removes the hook.
func SetWorkflowTaskHook(fn func(runID string, enter bool)) func() {
	testHookWorkflowTask.Store(&fn)
	return func() { testHookWorkflowTask.Store(nil) }
}

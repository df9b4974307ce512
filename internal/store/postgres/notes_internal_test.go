package postgres

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// Every note survives its trip through a NOTIFY payload; a close note
// carries its outcome when it fits, and only then.
func TestNotePayloads(t *testing.T) {
	t.Parallel()
	for name, n := range map[string]store.Note{
		"workflow tasks": {Kind: store.NoteWorkflowTasks, Queue: "q:1"},
		"activity tasks": {Kind: store.NoteActivityTasks, Queue: "default"},
		"timers":         {Kind: store.NoteTimers},
		"closed":         {Kind: store.NoteClosed, RunID: "run-1"},
		"completed": {Kind: store.NoteClosed, RunID: "run-1",
			Close: &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`{"a":[1,"x\ny"]}`)}},
		"failed": {Kind: store.NoteClosed, RunID: "run-1",
			Close: &store.CloseRun{Status: store.StatusFailed, Failure: &history.Failure{Message: "boom", Class: "x", Attempts: 2}}},
	} {
		got, ok := parseNote(notePayload(n))
		require.True(t, ok, name)
		require.Equal(t, n, got, name)
	}
	long := store.Note{Kind: store.NoteClosed, RunID: "run-2",
		Close: &store.CloseRun{Status: store.StatusCompleted, Result: json.RawMessage(`"` + strings.Repeat("x", maxNotifyPayload) + `"`)}}
	require.Equal(t, "c:run-2", notePayload(long), "too long: the run alone")
	_, ok := parseNote("z:what")
	require.False(t, ok, "an unknown payload is no note")
}

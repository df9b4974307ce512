package history_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
)

func sample() history.History {
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	return history.History{
		WorkflowID: "onboard:ada", RunID: "r1", WorkflowType: "Onboard",
		Events: []history.Event{
			{ID: 1, Time: at, Attributes: history.WorkflowStarted{WorkflowType: "Onboard", WorkflowID: "onboard:ada", Queue: "default", Input: json.RawMessage(`{"Email":"ada@example.com"}`), Attempt: 1}},
			{ID: 2, Time: at, Attributes: history.ActivityScheduled{Seq: 1, Activity: "ChargeCard", Queue: "default", Input: json.RawMessage(`{"Cents":4900}`)}},
			{ID: 3, Time: at.Add(time.Second), Attributes: history.ActivityFailed{Seq: 1, Failure: history.Failure{Message: "declined", Class: "permanent", Attempts: 1}}},
			{ID: 4, Time: at.Add(time.Second), Attributes: history.TimerStarted{Seq: 2, FireAt: at.Add(time.Hour)}},
			{ID: 5, Time: at.Add(time.Hour), Attributes: history.TimerFired{Seq: 2}},
			{ID: 6, Time: at.Add(time.Hour), Attributes: history.WorkflowFailed{Failure: history.Failure{Message: "declined"}}},
		},
	}
}

func TestExportImportRoundTripsByteForByte(t *testing.T) {
	t.Parallel()
	var first bytes.Buffer
	require.NoError(t, history.Export(&first, sample()))
	h, err := history.Import(bytes.NewReader(first.Bytes()))
	require.NoError(t, err)
	var second bytes.Buffer
	require.NoError(t, history.Export(&second, h))
	require.Equal(t, first.String(), second.String())
	require.Contains(t, first.String(), `"Email": "ada@example.com"`, "payloads stay readable JSON")
}

// Export names an event's type before its attributes, which Import then
// decodes as it reads them; a file edited by hand may have them the other
// way round, or its fields in any order.
func TestImportReadsFieldsInAnyOrder(t *testing.T) {
	t.Parallel()
	in := `{"events":[
		{"attributes":{"workflow_type":"W","workflow_id":"w","queue":"q","input":1},"type":"workflow_started","time":"2030-01-01T00:00:00Z","id":1},
		{"id":2,"type":"timer_started","attributes":{"fire_at":"2030-01-01T01:00:00Z","seq":1},"time":"2030-01-01T00:00:01Z"}
	],"run_id":"r","version":1}`
	h, err := history.Import(bytes.NewReader([]byte(in)))
	require.NoError(t, err)
	require.Equal(t, "r", h.RunID)
	require.Equal(t, []history.Event{
		{ID: 1, Time: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
			Attributes: history.WorkflowStarted{WorkflowType: "W", WorkflowID: "w", Queue: "q", Input: json.RawMessage("1")}},
		{ID: 2, Time: time.Date(2030, 1, 1, 0, 0, 1, 0, time.UTC), Attributes: history.TimerStarted{Seq: 1, FireAt: time.Date(2030, 1, 1, 1, 0, 0, 0, time.UTC)}},
	}, h.Events)
}

func TestImportRejectsBadHistories(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, in, want string
	}{
		{"not json", `{`, "unexpected EOF"},
		{"future version", `{"version":2,"events":[]}`, "format version 2"},
		{"no events", `{"version":1,"run_id":"r","events":[]}`, "no events"},
		{"gap", `{"version":1,"run_id":"r","events":[{"id":1,"time":"2030-01-01T00:00:00Z","type":"workflow_started","attributes":{"workflow_type":"W","workflow_id":"w","queue":"q","input":null}},{"id":3,"time":"2030-01-01T00:00:00Z","type":"timer_fired","attributes":{"seq":1}}]}`, "event 2 has ID 3"},
		{"unknown event", `{"version":1,"run_id":"r","events":[{"id":1,"time":"2030-01-01T00:00:00Z","type":"nope","attributes":{}}]}`, `unknown event type "nope"`},
		{"unknown field", `{"version":1,"extra":1,"events":[]}`, `unknown field "extra"`},
		{"unknown event field", `{"version":1,"run_id":"r","events":[{"id":1,"type":"timer_fired","attributes":{"seq":1},"extra":1}]}`, `unknown field "extra"`},
		{"unknown attribute", `{"version":1,"run_id":"r","events":[{"id":1,"type":"timer_fired","attributes":{"seq":1,"extra":1}}]}`, `event 1: decode timer_fired event: json: unknown field "extra"`},
		{"unknown attribute, type after", `{"version":1,"run_id":"r","events":[{"id":1,"attributes":{"seq":1,"extra":1},"type":"timer_fired"}]}`, `event 1: decode timer_fired event: json: unknown field "extra"`},
		{"cut short", `{"version":1,"run_id":"r","events":[{"id":1,"type":"timer_fired","attributes":{"seq":1}}`, "unexpected EOF"},
		{"trailing data", `{"version":1,"run_id":"r","events":[]} {}`, "trailing data"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := history.Import(bytes.NewReader([]byte(tt.in)))
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// FuzzImport: whatever imports re-exports to bytes that import to an equal
// history and export identically.
func FuzzImport(f *testing.F) {
	var b bytes.Buffer
	if err := history.Export(&b, sample()); err != nil {
		f.Fatal(err)
	}
	f.Add(b.Bytes())
	files, _ := filepath.Glob(filepath.Join("..", "testdata", "histories", "*.json"))
	for _, name := range files {
		if data, err := os.ReadFile(name); err == nil {
			f.Add(data)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := history.Import(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		require.NoError(t, history.Export(&out, h))
		h2, err := history.Import(bytes.NewReader(out.Bytes()))
		require.NoError(t, err)
		var out2 bytes.Buffer
		require.NoError(t, history.Export(&out2, h2))
		require.Equal(t, out.String(), out2.String())
	})
}

// FuzzDecodeEvent: decoding never panics, and what decodes re-encodes stably.
func FuzzDecodeEvent(f *testing.F) {
	for _, e := range sample().Events {
		b, err := json.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e history.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return
		}
		b, err := json.Marshal(e)
		require.NoError(t, err)
		var e2 history.Event
		require.NoError(t, json.Unmarshal(b, &e2))
		b2, err := json.Marshal(e2)
		require.NoError(t, err)
		require.Equal(t, string(b), string(b2))
	})
}

// An outcome (an activity's, a timer's, a child's) must follow the event
// that scheduled it: a history edited by hand, or recorded by a bug, that
// has it the other way round is refused by name, not replayed.
func TestImportRejectsOutcomesBeforeTheirSchedule(t *testing.T) {
	t.Parallel()
	const start = `{"id":1,"time":"2030-01-01T00:00:00Z","type":"workflow_started","attributes":{"workflow_type":"W","workflow_id":"w","queue":"q","input":null}}`
	event := func(id int, typ, attrs string) string {
		return fmt.Sprintf(`{"id":%d,"time":"2030-01-01T00:00:00Z","type":%q,"attributes":%s}`, id, typ, attrs)
	}
	scheduled := func(id int) string {
		return event(id, "activity_scheduled", `{"seq":1,"activity":"A","queue":"q","input":null}`)
	}
	for _, tt := range []struct {
		name   string
		events []string
		want   string
	}{
		{"activity completed before scheduled", []string{event(2, "activity_completed", `{"seq":1,"result":1,"attempt":1}`), scheduled(3)},
			"event 2 (activity_completed) has no activity_scheduled with seq 1 before it"},
		{"activity failed, never scheduled", []string{event(2, "activity_failed", `{"seq":1,"failure":{"message":"x"}}`)},
			"event 2 (activity_failed) has no activity_scheduled with seq 1 before it"},
		{"activity canceled before scheduled", []string{event(2, "activity_canceled", `{"seq":1}`), scheduled(3)},
			"event 2 (activity_canceled) has no activity_scheduled with seq 1 before it"},
		{"timer fired before started", []string{event(2, "timer_fired", `{"seq":4}`), event(3, "timer_started", `{"seq":4,"fire_at":"2030-01-01T01:00:00Z"}`)},
			"event 2 (timer_fired) has no timer_started with seq 4 before it"},
		{"timer canceled, never started", []string{scheduled(2), event(3, "timer_canceled", `{"seq":1}`)},
			"event 3 (timer_canceled) has no timer_started with seq 1 before it"},
		{"child completed before scheduled", []string{event(2, "child_workflow_completed", `{"seq":2,"result":1}`),
			event(3, "child_workflow_scheduled", `{"seq":2,"workflow_type":"C","workflow_id":"c","queue":"q","input":null,"parent_close_policy":"terminate"}`)},
			"event 2 (child_workflow_completed) has no child_workflow_scheduled with seq 2 before it"},
		{"child failed for an activity's seq", []string{scheduled(2), event(3, "child_workflow_failed", `{"seq":1,"failure":{"message":"x"}}`)},
			"event 3 (child_workflow_failed) has no child_workflow_scheduled with seq 1 before it"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := `{"version":1,"run_id":"r","events":[` + start + "," + strings.Join(tt.events, ",") + `]}`
			_, err := history.Import(strings.NewReader(in))
			require.ErrorContains(t, err, "import history: run r: "+tt.want)
		})
	}
}

package history_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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

package history_test

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/durable-go/durable/history"
)

// loop is the history of a workflow that ran n activities in a row:
// 2n+2 events, the shape of the performance issue's W4.
func loop(n int) history.History {
	opts := json.RawMessage(`{"name":"Noop","start_to_close":60000000000,"retry":{"initial_interval":1000000000,"backoff":2,"max_interval":100000000000}}`)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	num := func(x int) json.RawMessage { return json.RawMessage(strconv.Itoa(x)) }
	attrs := []history.Attributes{history.WorkflowStarted{WorkflowType: "Loop", WorkflowID: "w", Queue: "default", Input: num(n), Attempt: 1}}
	for i := 1; i <= n; i++ {
		attrs = append(attrs,
			history.ActivityScheduled{Seq: int64(i), Activity: "Noop", Queue: "default", Input: num(i - 1), Options: opts},
			history.ActivityCompleted{Seq: int64(i), Result: num(i), Attempt: 1})
	}
	attrs = append(attrs, history.WorkflowCompleted{Result: num(n)})
	h := history.History{Version: history.FormatVersion, WorkflowID: "w", RunID: "r", WorkflowType: "Loop"}
	for i, a := range attrs {
		h.Events = append(h.Events, history.Event{ID: int64(i + 1), Time: at, Attributes: a})
	}
	return h
}

// BenchmarkDecode decodes the attributes of a 10,000-event history, as a
// read of the history from the database does.
func BenchmarkDecode(b *testing.B) {
	h := loop(4999)
	types, data := make([]string, len(h.Events)), make([][]byte, len(h.Events))
	for i, e := range h.Events {
		var err error
		types[i] = e.Type()
		if data[i], err = history.Encode(e.Attributes); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		for i := range types {
			if _, err := history.Decode(types[i], data[i]); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkImport reads back an exported 10,000-event history.
func BenchmarkImport(b *testing.B) {
	var buf bytes.Buffer
	if err := history.Export(&buf, loop(4999)); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := history.Import(bytes.NewReader(buf.Bytes())); err != nil {
			b.Fatal(err)
		}
	}
}

package postgres

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/history"
)

// A long history is decoded in parts, at once; the events keep their
// order, and the error reported is that of the first bad row.
func TestDecodeEventsKeepsOrderAndTheFirstError(t *testing.T) {
	t.Parallel()
	const parts = 3 // whatever the CPUs: a part's bounds are what is tested
	rows := make([]eventRow, 3*decodePartMin+2)
	at := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range rows {
		rows[i] = eventRow{id: int64(i + 1), typ: "timer_fired", attrs: []byte(`{"seq":` + strconv.Itoa(i) + `}`), at: at}
	}
	events, err := decodeEvents(rows, parts)
	require.NoError(t, err)
	require.Len(t, events, len(rows))
	for i, e := range events {
		require.Equal(t, history.Event{ID: int64(i + 1), Time: at, Attributes: history.TimerFired{Seq: int64(i)}}, e)
	}

	rows[len(rows)-10].attrs = []byte(`{"seq":"late"}`) // in the last part
	rows[10].attrs = []byte(`{"seq":"early"}`)          // in the first
	_, err = decodeEvents(rows, parts)
	require.ErrorContains(t, err, "event 11:")
}

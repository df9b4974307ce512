package postgres

import (
	"context"
	"encoding/json"
	"strings"
	"time"

	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/store"
)

// Notes travel on one LISTEN/NOTIFY channel as text payloads:
//
//	w:<queue>   a workflow task of the queue is ready
//	a:<queue>   an activity task of the queue is ready
//	t:          a timer was created
//	c:<run id>  a run closed, followed, when it fits, by a newline and its
//	            outcome as JSON (closeNote)
//
// The statements that make work ready send the first two themselves
// (pg_notify in their SQL); Notify sends the others.
const notifyChannel = "durable"

// maxNotifyPayload is the longest payload Postgres's NOTIFY takes (less
// than 8000 bytes).
const maxNotifyPayload = 7999

// closeNote is a run's outcome in its close notification.
type closeNote struct {
	Status  string           `json:"s"`
	Result  json.RawMessage  `json:"r,omitempty"`
	Failure *history.Failure `json:"f,omitempty"`
}

// notePayload is n as a NOTIFY payload.
func notePayload(n store.Note) string {
	switch n.Kind {
	case store.NoteWorkflowTasks:
		return "w:" + n.Queue
	case store.NoteActivityTasks:
		return "a:" + n.Queue
	case store.NoteTimers:
		return "t:"
	}
	k := "c:" + n.RunID
	if c := n.Close; c != nil {
		b, err := json.Marshal(closeNote{Status: c.Status, Result: c.Result, Failure: c.Failure})
		if err == nil && len(k)+1+len(b) <= maxNotifyPayload {
			return k + "\n" + string(b)
		}
	}
	return k
}

// parseNote reads a NOTIFY payload; ok is false for one it does not know.
func parseNote(p string) (n store.Note, ok bool) {
	kind, rest, _ := strings.Cut(p, ":")
	switch kind {
	case "w":
		return store.Note{Kind: store.NoteWorkflowTasks, Queue: rest}, true
	case "a":
		return store.Note{Kind: store.NoteActivityTasks, Queue: rest}, true
	case "t":
		return store.Note{Kind: store.NoteTimers}, true
	case "c":
	default:
		return store.Note{}, false
	}
	runID, outcome, hasOutcome := strings.Cut(rest, "\n")
	n = store.Note{Kind: store.NoteClosed, RunID: runID}
	var c closeNote
	if hasOutcome && json.Unmarshal([]byte(outcome), &c) == nil && c.Status != "" {
		n.Close = &store.CloseRun{Status: c.Status, Result: c.Result, Failure: c.Failure}
	}
	return n, true
}

// notifySQL sends notifications on the store's pool. Its transaction
// commits asynchronously: a lost notification costs latency, never work.
const notifySQL = `
SELECT count(pg_notify('` + notifyChannel + `', k))
FROM set_config('synchronous_commit', 'off', true), unnest($1::text[]) AS k`

// notifyInTxSQL sends notifications in a caller's transaction, at its
// commit; unlike notifySQL it leaves that commit's durability alone.
const notifyInTxSQL = `SELECT count(pg_notify('` + notifyChannel + `', k)) FROM unnest($1::text[]) AS k`

// Notify implements store.Store.
func (s *Store) Notify(ctx context.Context, notes []store.Note) error {
	if len(notes) == 0 {
		return nil
	}
	payloads := make([]string, len(notes))
	for i, n := range notes {
		payloads[i] = notePayload(n)
	}
	sql := notifySQL
	if s.caller {
		sql = notifyInTxSQL
	}
	_, err := s.db.Exec(ctx, sql, payloads)
	return err
}

// Listen implements store.Store on a connection of the pool, which goes
// back to the pool when it returns, after UNLISTEN (a client that waits
// for one Result at a time would otherwise dial a new connection for
// each); one that cannot say it is closed instead.
func (s *Store) Listen(ctx context.Context, onListen func(), deliver func(store.Note)) error {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	pc := conn.Conn()
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if _, err := pc.Exec(uctx, "UNLISTEN *"); err != nil {
			pc.Close(uctx)
		}
		conn.Release()
	}()
	if _, err := pc.Exec(ctx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	onListen()
	for {
		m, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		if n, ok := parseNote(m.Payload); ok {
			deliver(n)
		}
	}
}

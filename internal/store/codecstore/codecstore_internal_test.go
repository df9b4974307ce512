package codecstore

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/postgres"
)

var (
	rawMessageType = reflect.TypeFor[json.RawMessage]()
	attributesType = reflect.TypeFor[history.Attributes]()
)

// carriesPayload reports whether a value of type t can hold a payload: a
// json.RawMessage or an event's attributes, anywhere inside it.
func carriesPayload(t reflect.Type, seen map[reflect.Type]bool) bool {
	if t == rawMessageType || t == attributesType {
		return true
	}
	if seen[t] {
		return false
	}
	seen[t] = true
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
		return carriesPayload(t.Elem(), seen)
	case reflect.Map:
		return carriesPayload(t.Key(), seen) || carriesPayload(t.Elem(), seen)
	case reflect.Struct:
		for i := range t.NumField() {
			if carriesPayload(t.Field(i).Type, seen) {
				return true
			}
		}
	case reflect.Func:
		for i := range t.NumIn() {
			if carriesPayload(t.In(i), seen) {
				return true
			}
		}
		for i := range t.NumOut() {
			if carriesPayload(t.Out(i), seen) {
				return true
			}
		}
	}
	return false
}

// TestCodecStorageOverridesEveryPayloadMethod: every store method whose
// parameters or results can carry a payload is declared on Store in
// codecstore.go, not promoted from the embedded store. A method added to the
// store interface with a payload fails here until the codec handles it.
func TestCodecStorageOverridesEveryPayloadMethod(t *testing.T) {
	t.Parallel()
	f, err := parser.ParseFile(token.NewFileSet(), "codecstore.go", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	declared := map[string]bool{}
	for _, d := range f.Decls {
		fn, ok := d.(*ast.FuncDecl)
		if !ok || fn.Recv == nil {
			continue
		}
		if id, ok := fn.Recv.List[0].Type.(*ast.Ident); ok && id.Name == "Store" {
			declared[fn.Name.Name] = true
		}
	}
	st := reflect.TypeFor[store.Store]()
	var payloadMethods []string
	for i := range st.NumMethod() {
		m := st.Method(i)
		if carriesPayload(m.Type, map[reflect.Type]bool{}) {
			payloadMethods = append(payloadMethods, m.Name)
			require.True(t, declared[m.Name], "store.Store.%s carries payloads: Store must encode or decode them", m.Name)
		}
	}
	require.Contains(t, payloadMethods, "CommitWorkflowTask", "the payload detector works")
	require.NotContains(t, payloadMethods, "NextDue", "the payload detector works")
}

// TestCodecCoversEveryEventPayload: mapPayloads passes every payload field
// of every event type of package history (every json.RawMessage field but
// activity options) through the codec, and back.
func TestCodecCoversEveryEventPayload(t *testing.T) {
	t.Parallel()
	src, err := os.ReadFile("../../../history/events.go")
	require.NoError(t, err)
	names := regexp.MustCompile(`\) EventType\(\) string\s*\{\s*return "(\w+)"`).FindAllSubmatch(src, -1)
	require.GreaterOrEqual(t, len(names), 20, "the event types are found")
	c, err := codec.AESGCM(bytes.Repeat([]byte{9}, 32))
	require.NoError(t, err)
	s := Store{c: c}
	const plain = `"payload"`
	for _, m := range names {
		zero, err := history.Decode(string(m[1]), []byte(`{}`))
		require.NoError(t, err)
		v := reflect.New(reflect.TypeOf(zero)).Elem()
		var payloads []string
		for i := range v.NumField() {
			if v.Field(i).Type() == rawMessageType {
				v.Field(i).SetBytes([]byte(plain))
				if v.Type().Field(i).Name != "Options" {
					payloads = append(payloads, v.Type().Field(i).Name)
				}
			}
		}
		in := v.Interface().(history.Attributes)
		enc, err := mapPayloads(in, s.encode)
		require.NoError(t, err)
		ev := reflect.ValueOf(enc)
		for _, name := range payloads {
			require.True(t, codec.IsWrapped(ev.FieldByName(name).Bytes()), "%s.%s is encoded", m[1], name)
		}
		if f := ev.FieldByName("Options"); f.IsValid() {
			require.Equal(t, plain, string(f.Bytes()), "%s options stay readable", m[1])
		}
		dec, err := mapPayloads(enc, s.decode)
		require.NoError(t, err)
		require.Equal(t, in, dec, "%s decodes to itself", m[1])
	}
}

// codecStores is a real Postgres store, and the same store behind the
// codec with key 1, with key 2, with none, and with key 1 refusing to
// encode some payloads.
type codecStores struct {
	pool                             *pgxpool.Pool
	base, key1, key2, none, refusing store.Store
	ctx                              context.Context
	now                              time.Time
}

func setupCodecStores(t *testing.T) *codecStores {
	t.Helper()
	pool := pgtest.Pool(t)
	base := store.Store(postgres.New(pool))
	c1, err := codec.AESGCM(bytes.Repeat([]byte{1}, 32))
	require.NoError(t, err)
	c2, err := codec.AESGCM(bytes.Repeat([]byte{2}, 32))
	require.NoError(t, err)
	log := slog.New(slog.DiscardHandler)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return &codecStores{
		pool: pool, base: base,
		key1: New(base, c1, log), key2: New(base, c2, log), none: New(base, nil, log),
		refusing: New(base, refuseCodec{c1}, log),
		ctx:      ctx, now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC),
	}
}

// refuseCodec fails to encode payloads that say "refuse".
type refuseCodec struct{ codec.PayloadCodec }

func (r refuseCodec) Encode(p []byte) ([]byte, error) {
	if bytes.Contains(p, []byte("refuse")) {
		return nil, errors.New("key service unavailable")
	}
	return r.PayloadCodec.Encode(p)
}

// TestCodecActivityTaskWithWrongKeyIsGivenBack: a worker that cannot decode
// an activity's input does not run it or spend its attempt: it gives the
// task back, with the error, for a worker with the right key.
func TestCodecActivityTaskWithWrongKeyIsGivenBack(t *testing.T) {
	t.Parallel()
	s := setupCodecStores(t)
	ctx, now := s.ctx, s.now
	id, _, err := s.key1.EnqueueJob(ctx, store.EnqueueJobParams{Now: now, Task: store.NewActivityTask{
		Activity: "Ship", Queue: "q", Input: json.RawMessage(`"parcel"`), IdempotencyKey: "k", MaxAttempts: 1,
		Lease: time.Minute, RunAfter: now,
	}})
	require.NoError(t, err)
	row := func() (attempt, maxAttempts int, lastError string, runAfter time.Time, locked bool) {
		t.Helper()
		require.NoError(t, s.pool.QueryRow(ctx, `SELECT attempt, max_attempts, coalesce(last_error, ''), run_after, locked_by IS NOT NULL
			FROM durable_activity_tasks WHERE id = $1`, id).Scan(&attempt, &maxAttempts, &lastError, &runAfter, &locked))
		return
	}
	for i, wrong := range []store.Store{s.key2, s.none} {
		at := now.Add(time.Duration(i) * codecRetryDelay)
		tasks, err := wrong.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "wrong", Limit: 10, Now: at})
		require.NoError(t, err)
		require.Empty(t, tasks, "a task that does not decode is not run")
		attempt, maxAttempts, lastError, runAfter, locked := row()
		require.Equal(t, i+1, attempt)
		require.Equal(t, i+2, maxAttempts, "the attempt is given back")
		require.Contains(t, lastError, "job "+strconv.FormatInt(id, 10)+" (Ship) input: ")
		require.False(t, locked)
		require.Equal(t, at.Add(codecRetryDelay), runAfter.UTC())
	}
	_, _, lastError, _, _ := row()
	require.Contains(t, lastError, "no codec was given")

	tasks, err := s.key1.ClaimActivityTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "right", Limit: 10, Now: now.Add(2 * codecRetryDelay)})
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	require.Equal(t, `"parcel"`, string(tasks[0].Input))
	require.Equal(t, 3, tasks[0].Attempt)
	require.Equal(t, 3, tasks[0].MaxAttempts, "the last attempt is still there to run")
}

// TestCodecEncodeErrorCommitsNothing: a commit whose payload cannot be
// encoded writes nothing; the same claim then commits; hand-offs carry
// plaintext.
func TestCodecEncodeErrorCommitsNothing(t *testing.T) {
	t.Parallel()
	s := setupCodecStores(t)
	ctx, now := s.ctx, s.now
	runID := uuid.NewString()
	_, err := s.refusing.CreateRun(ctx, store.CreateRunParams{RunID: runID, WorkflowID: "w", WorkflowType: "W", Queue: "q", Input: json.RawMessage(`1`), Now: now})
	require.NoError(t, err)
	claimed, err := s.refusing.ClaimWorkflowTasks(ctx, store.ClaimParams{Queue: "q", WorkerID: "me", Limit: 1, Now: now, Lease: time.Minute})
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	commit := func(value string, claimAs string) (store.Ready, error) {
		return s.refusing.CommitWorkflowTask(ctx, store.CommitWorkflowTaskParams{
			RunID: runID, WorkflowID: "w", WorkflowQueue: "q", Token: claimed[0].Token, ProcessedEventID: 1, Now: now,
			Events: []history.Attributes{
				history.SideEffectRecorded{Seq: 1, Value: json.RawMessage(value)},
				history.ActivityScheduled{Seq: 2, Activity: "A", Queue: "q", Input: json.RawMessage(value)},
			},
			Activities: []store.NewActivityTask{{Seq: 2, Activity: "A", Queue: "q", Input: json.RawMessage(value),
				IdempotencyKey: runID + ":2", Lease: time.Minute, RunAfter: now, ClaimAs: claimAs}},
		})
	}
	_, err = commit(`"refuse"`, "")
	require.ErrorContains(t, err, "commit workflow task of run "+runID+": side_effect_recorded value: encode payload: key service unavailable")
	events, err := s.refusing.ListEvents(ctx, runID, 0)
	require.NoError(t, err)
	require.Len(t, events, 1, "nothing was appended")

	ready, err := commit(`"fine"`, "me")
	require.NoError(t, err, "the claim still holds: the refused commit did nothing")
	require.Len(t, ready.ActivityTasks, 1)
	require.Equal(t, `"fine"`, string(ready.ActivityTasks[0].Input), "the hand-off carries plaintext")
	raw, err := s.base.ListEvents(ctx, runID, 1)
	require.NoError(t, err)
	require.True(t, codec.IsWrapped(raw[0].Attributes.(history.SideEffectRecorded).Value), "stored encoded")

	ready, err = s.refusing.ResolveActivity(ctx, store.ResolveActivityParams{
		RunID: runID, TaskID: ready.ActivityTasks[0].ID, Attempt: 1, Now: now, ClaimAs: "me", Lease: time.Minute,
		Event: history.ActivityCompleted{Seq: 2, Result: json.RawMessage(`"done"`), Attempt: 1},
	})
	require.NoError(t, err)
	require.Len(t, ready.WorkflowTasks, 1)
	require.Equal(t, history.ActivityCompleted{Seq: 2, Result: json.RawMessage(`"done"`), Attempt: 1},
		ready.WorkflowTasks[0].Events[0].Attributes, "the hand-off carries plaintext")
}

// FuzzCodecEvent: any event that decodes goes through the codec and back
// unchanged, and its stored form holds no payload in the clear.
func FuzzCodecEvent(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"time":"2030-01-01T00:00:00Z","type":"workflow_started","attributes":{"workflow_type":"W","workflow_id":"w","queue":"q","input":{"a":"b"}}}`,
		`{"id":2,"time":"2030-01-01T00:00:00Z","type":"activity_completed","attributes":{"seq":1,"result":"ok","attempt":1}}`,
		`{"id":3,"time":"2030-01-01T00:00:00Z","type":"signal_received","attributes":{"name":"n","payload":[1,2]}}`,
		`{"id":4,"time":"2030-01-01T00:00:00Z","type":"activity_scheduled","attributes":{"seq":1,"activity":"A","queue":"q","input":null,"options":{"x":1}}}`,
		`{"id":5,"time":"2030-01-01T00:00:00Z","type":"side_effect_recorded","attributes":{"seq":2,"value":{"durable_codec":"AA=="}}}`,
		`{"id":6,"time":"2030-01-01T00:00:00Z","type":"timer_fired","attributes":{"seq":3}}`,
	} {
		f.Add([]byte(s))
	}
	c, err := codec.AESGCM(bytes.Repeat([]byte{7}, 32))
	if err != nil {
		f.Fatal(err)
	}
	s := Store{c: c}
	f.Fuzz(func(t *testing.T, data []byte) {
		var e history.Event
		if json.Unmarshal(data, &e) != nil {
			return
		}
		enc, err := mapPayloads(e.Attributes, s.encode)
		require.NoError(t, err)
		b, err := history.Encode(enc)
		require.NoError(t, err)
		stored, err := history.Decode(e.Type(), b)
		require.NoError(t, err, "an encoded event is a valid event")
		dec, err := mapPayloads(stored, s.decode)
		require.NoError(t, err)
		want, err := history.Encode(e.Attributes)
		require.NoError(t, err)
		got, err := history.Encode(dec)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	})
}

// TestCodecSignalIsCheckedAgainstWhatTheRunHolds: a run started without a
// codec holds no encoded input, so a signal is checked against the newest
// encoded payload of its history; a cancel request, which carries no
// payload, and a plain payload from an engine without a codec pass.
func TestCodecSignalIsCheckedAgainstWhatTheRunHolds(t *testing.T) {
	t.Parallel()
	s := setupCodecStores(t)
	ctx, now := s.ctx, s.now
	runID := uuid.NewString()
	_, err := s.none.CreateRun(ctx, store.CreateRunParams{RunID: runID, WorkflowID: "w", WorkflowType: "W", Queue: "q", Input: json.RawMessage(`1`), Now: now})
	require.NoError(t, err)
	signal := func(st store.Store, payload string) error {
		_, err := st.SignalRun(ctx, store.SignalParams{WorkflowID: "w", Now: now}, history.SignalReceived{Name: "s", Payload: json.RawMessage(payload)})
		return err
	}
	require.NoError(t, signal(s.key1, `"first"`), "nothing encoded yet: the first key decides")
	err = signal(s.key2, `"wrong"`)
	require.ErrorIs(t, err, ErrCodecMismatch)
	require.ErrorContains(t, err, "event 2: signal_received payload: decode payload: aes-gcm")
	require.NoError(t, signal(s.none, `"plain"`), "a plain payload is read by every engine")
	require.ErrorIs(t, signal(s.key2, `"wrong"`), ErrCodecMismatch, "plain payloads are skipped for the newest encoded one")
	require.NoError(t, signal(s.key1, `"right"`))
	_, err = s.key2.SignalRun(ctx, store.SignalParams{WorkflowID: "w", Now: now}, history.WorkflowCancelRequested{Reason: "stop"})
	require.NoError(t, err, "a cancel request carries no payload")
	events, err := s.key1.ListEvents(ctx, runID, 0)
	require.NoError(t, err)
	var got []string
	for _, e := range events[1:] {
		if sr, ok := e.Attributes.(history.SignalReceived); ok {
			got = append(got, string(sr.Payload))
			continue
		}
		got = append(got, e.Type())
	}
	require.Equal(t, []string{`"first"`, `"plain"`, `"right"`, "workflow_cancel_requested"}, got, "the refused signals wrote nothing")
}

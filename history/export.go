package history

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// FormatVersion is the version of the export format that Export writes.
// Import reads this version only; a later format gets a new number.
const FormatVersion = 1

// History is a run's events with what identifies the run: the unit that is
// exported, imported and replayed.
type History struct {
	// Version is the export format's version (FormatVersion).
	Version      int    `json:"version"`
	WorkflowID   string `json:"workflow_id"`
	RunID        string `json:"run_id"`
	WorkflowType string `json:"workflow_type"`
	// Events are the run's events, IDs 1..n in order.
	Events []Event `json:"events"`
}

// Export writes h as indented JSON. Payloads stay readable JSON. The output
// for a given History is always the same bytes.
func Export(w io.Writer, h History) error {
	h.Version = FormatVersion
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return fmt.Errorf("export history of run %s: %w", h.RunID, err)
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// Import reads a history written by Export and checks it (Validate): a
// known version, events numbered 1..n, the first a WorkflowStarted, each
// outcome after its schedule. It reads r whole, then
// decodes what Export writes with the scanner of scan.go; anything else
// valid (fields in another order, keys in another case) it decodes as
// encoding/json does, with its errors.
func Import(r io.Reader) (History, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return History{}, fmt.Errorf("import history: %w", err)
	}
	h, ok := scanHistory(data)
	if !ok {
		h, err = readStream(data)
	}
	if err == nil {
		err = checkVersion(h.Version)
	}
	if err == nil {
		err = h.Validate()
	}
	if err != nil {
		return h, fmt.Errorf("import history: %w", err)
	}
	return h, nil
}

// readStream decodes a history with a json.Decoder, one event at a time;
// an event that names its type before its attributes, as Export writes
// them, has its attributes decoded as they are read.
func readStream(data []byte) (History, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	h, err := readHistory(dec)
	if err == nil && dec.More() {
		err = fmt.Errorf("trailing data after the history")
	}
	return h, err
}

// scanHistory decodes the history in b as Export writes it (any spacing
// and order of fields, each named once, a known version), or returns false.
func scanHistory(b []byte) (History, bool) {
	var h History
	s := scanner{b: b}
	ok := s.members([]string{"version", "workflow_id", "run_id", "workflow_type", "events"}, func(key string) (ok bool) {
		switch key {
		case "version":
			var n int64
			n, ok = s.int()
			h.Version = int(n)
			return ok && int64(h.Version) == n
		case "workflow_id":
			h.WorkflowID, ok = s.str()
		case "run_id":
			h.RunID, ok = s.str()
		case "workflow_type":
			h.WorkflowType, ok = s.str()
		case "events":
			h.Events, ok = s.events()
		}
		return ok
	})
	return h, ok && s.end() && h.Version == FormatVersion
}

// events reads an array of events.
func (s *scanner) events() ([]Event, bool) {
	if !s.next('[') {
		return nil, false
	}
	var events []Event
	if s.next(']') {
		return events, true
	}
	for {
		e, ok := s.event()
		if !ok {
			return nil, false
		}
		events = append(events, e)
		if !s.next(',') {
			return events, s.next(']')
		}
	}
}

// event reads an event as Event.MarshalJSON writes it, its fields in any
// order, each named once. Without a type or attributes, Decode fails.
func (s *scanner) event() (Event, bool) {
	var (
		e     Event
		typ   string
		attrs []byte
	)
	ok := s.members([]string{"id", "time", "type", "attributes"}, func(key string) (ok bool) {
		switch key {
		case "id":
			e.ID, ok = s.int()
		case "time":
			start := s.i
			return s.skipString() && e.Time.UnmarshalJSON(s.b[start:s.i]) == nil
		case "type":
			typ, ok = s.str()
		case "attributes":
			attrs, ok = s.raw()
		}
		return ok
	})
	if !ok {
		return e, false
	}
	a, err := Decode(typ, attrs)
	if err != nil {
		return e, false
	}
	e.Attributes = a
	return e, true
}

// checkVersion refuses a format version other than FormatVersion.
func checkVersion(v int) error {
	if v != FormatVersion {
		return fmt.Errorf("format version %d, this build reads version %d", v, FormatVersion)
	}
	return nil
}

// readHistory reads the object Export writes, field by field.
func readHistory(dec *json.Decoder) (History, error) {
	var h History
	err := readObject(dec, func(key string) (err error) {
		switch key {
		case "version":
			if err = dec.Decode(&h.Version); err == nil {
				err = checkVersion(h.Version) // before events it may not read
			}
		case "workflow_id":
			err = dec.Decode(&h.WorkflowID)
		case "run_id":
			err = dec.Decode(&h.RunID)
		case "workflow_type":
			err = dec.Decode(&h.WorkflowType)
		case "events":
			h.Events, err = readEvents(dec)
		default:
			err = fmt.Errorf("json: unknown field %q", key)
		}
		return err
	})
	return h, err
}

// readEvents reads the array of events (or null).
func readEvents(dec *json.Decoder) ([]Event, error) {
	tok, err := dec.Token()
	if err != nil || tok == nil {
		return nil, unexpectedEOF(err)
	}
	if tok != json.Delim('[') {
		return nil, fmt.Errorf("events: found %v, want an array", tok)
	}
	var events []Event
	for dec.More() {
		e, err := readEvent(dec)
		if err != nil {
			return nil, err
		}
		events = append(events, e)
	}
	return events, readDelim(dec, ']')
}

// readEvent reads an event as Event.MarshalJSON writes it.
func readEvent(dec *json.Decoder) (Event, error) {
	var (
		e   Event
		w   eventJSON
		got bool // attributes decoded as read
	)
	err := readObject(dec, func(key string) (err error) {
		switch key {
		case "id":
			err = dec.Decode(&w.ID)
		case "time":
			err = dec.Decode(&w.Time)
		case "type":
			err = dec.Decode(&w.Type)
		case "attributes":
			if d, ok := decoders[w.Type]; ok {
				if e.Attributes, err = d.stream(dec); err != nil {
					err = fmt.Errorf("event %d: decode %s event: %w", w.ID, w.Type, err)
				}
				got = err == nil
			} else {
				err = dec.Decode(&w.Attributes) // the type may follow
			}
		default:
			err = fmt.Errorf("decode event: json: unknown field %q", key)
		}
		return err
	})
	if err != nil {
		return e, err
	}
	if !got { // the type came after the attributes, or never
		return w.event()
	}
	e.ID, e.Time = w.ID, w.Time
	return e, nil
}

// readObject reads an object, handing each key to field to read its value.
func readObject(dec *json.Decoder, field func(key string) error) error {
	if err := readDelim(dec, '{'); err != nil {
		return err
	}
	for dec.More() {
		key, err := readKey(dec)
		if err != nil {
			return err
		}
		if err := field(key); err != nil {
			return err
		}
	}
	return readDelim(dec, '}')
}

// readKey reads an object's next key.
func readKey(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", unexpectedEOF(err)
	}
	key, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("found %v, want an object key", tok)
	}
	return key, nil
}

// readDelim reads the delimiter want.
func readDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return unexpectedEOF(err)
	}
	if tok != want {
		return fmt.Errorf("found %v, want %v", tok, want)
	}
	return nil
}

// unexpectedEOF turns the end of the input, where more was due, into
// io.ErrUnexpectedEOF.
func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// Validate checks that the events are numbered 1..n, start with a
// WorkflowStarted, and that each outcome (of an activity, a timer, a child
// workflow) follows the event that scheduled it, with the same seq.
func (h History) Validate() error {
	if len(h.Events) == 0 {
		return fmt.Errorf("run %s: no events", h.RunID)
	}
	if _, ok := h.Events[0].Attributes.(WorkflowStarted); !ok {
		return fmt.Errorf("run %s: event 1 is %s, not workflow_started", h.RunID, h.Events[0].Type())
	}
	scheduled := map[scheduledSeq]bool{}
	for i, e := range h.Events {
		if e.ID != int64(i+1) {
			return fmt.Errorf("run %s: event %d has ID %d", h.RunID, i+1, e.ID)
		}
		if key, ok := schedules(e.Attributes); ok {
			scheduled[key] = true
		} else if key, ok := outcomeOf(e.Attributes); ok && !scheduled[key] {
			return fmt.Errorf("run %s: event %d (%s) has no %s with seq %d before it: an outcome must follow the event that scheduled it",
				h.RunID, e.ID, e.Type(), key.schedule, key.seq)
		}
	}
	return nil
}

// scheduledSeq names a command that later events refer to: the type of the
// event that scheduled it, and its seq.
type scheduledSeq struct {
	schedule string
	seq      int64
}

// schedules returns the command that a starts, if it starts one that an
// outcome refers to.
func schedules(a Attributes) (scheduledSeq, bool) {
	switch a := a.(type) {
	case ActivityScheduled:
		return scheduledSeq{a.EventType(), a.Seq}, true
	case TimerStarted:
		return scheduledSeq{a.EventType(), a.Seq}, true
	case ChildWorkflowScheduled:
		return scheduledSeq{a.EventType(), a.Seq}, true
	case ExternalSignalScheduled, ExternalCancelScheduled:
		return scheduledSeq{externalRequest, seqOf(a)}, true
	}
	return scheduledSeq{}, false
}

// externalRequest names, in scheduledSeq, the two commands an external
// request's outcome may follow.
const externalRequest = "external_signal_scheduled or external_cancel_scheduled"

// seqOf returns the sequence number of an external request's command.
func seqOf(a Attributes) int64 {
	switch a := a.(type) {
	case ExternalSignalScheduled:
		return a.Seq
	case ExternalCancelScheduled:
		return a.Seq
	}
	return 0
}

// outcomeOf returns the command that a is an outcome of, if it is one.
func outcomeOf(a Attributes) (scheduledSeq, bool) {
	var (
		activity = ActivityScheduled{}.EventType()
		timer    = TimerStarted{}.EventType()
		child    = ChildWorkflowScheduled{}.EventType()
	)
	switch a := a.(type) {
	case ActivityCompleted:
		return scheduledSeq{activity, a.Seq}, true
	case ActivityFailed:
		return scheduledSeq{activity, a.Seq}, true
	case ActivityCanceled:
		return scheduledSeq{activity, a.Seq}, true
	case TimerFired:
		return scheduledSeq{timer, a.Seq}, true
	case TimerCanceled:
		return scheduledSeq{timer, a.Seq}, true
	case ChildWorkflowStarted:
		return scheduledSeq{child, a.Seq}, true
	case ChildWorkflowCompleted:
		return scheduledSeq{child, a.Seq}, true
	case ChildWorkflowFailed:
		return scheduledSeq{child, a.Seq}, true
	case ExternalRequestCompleted:
		return scheduledSeq{externalRequest, a.Seq}, true
	case ExternalRequestFailed:
		return scheduledSeq{externalRequest, a.Seq}, true
	}
	return scheduledSeq{}, false
}

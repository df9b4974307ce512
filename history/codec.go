package history

import (
	"encoding/json"
	"fmt"
	"reflect"
	"time"
)

// decoders maps each wire name to the decoding of its attributes.
var decoders = map[string]decoder{}

// decoder decodes the attributes of one event type, from their bytes
// (Decode) or as the next value of a stream (Import).
type decoder struct {
	bytes  func([]byte) (Attributes, error)
	stream func(*json.Decoder) (Attributes, error)
}

func init() {
	register[WorkflowStarted]()
	register[WorkflowCompleted]()
	register[WorkflowFailed]()
	register[ActivityScheduled]()
	register[ActivityCompleted]()
	register[ActivityFailed]()
	register[TimerStarted]()
	register[TimerFired]()
	register[TimerCanceled]()
	register[SideEffectRecorded]()
	register[SignalReceived]()
	register[WorkflowCancelRequested]()
	register[WorkflowCanceled]()
	register[WorkflowTerminated]()
	register[ActivityCanceled]()
	register[VersionMarker]()
	register[WorkflowContinuedAsNew]()
	register[ChildWorkflowScheduled]()
	register[ChildWorkflowStarted]()
	register[ChildWorkflowCompleted]()
	register[ChildWorkflowFailed]()
	register[WorkflowTaskCompleted]()
	register[ExternalSignalScheduled]()
	register[ExternalCancelScheduled]()
	register[ExternalRequestCompleted]()
	register[ExternalRequestFailed]()
}

func register[T Attributes]() {
	var zero T
	fields := jsonFields(reflect.TypeFor[T]())
	decoders[zero.EventType()] = decoder{
		stream: func(dec *json.Decoder) (Attributes, error) {
			var v T
			if err := dec.Decode(&v); err != nil {
				return nil, err
			}
			return v, nil
		},
		// As a json.Decoder with DisallowUnknownFields would: the scanner
		// (scan.go), or where it gives up, json.Unmarshal and then a look
		// at the object's keys.
		bytes: func(b []byte) (Attributes, error) {
			var v T
			if decodeFast(b, fields, reflect.ValueOf(&v).Elem()) {
				return v, nil
			}
			v = zero
			if err := json.Unmarshal(b, &v); err != nil {
				return nil, err
			}
			if err := knownKeys(b, fields); err != nil {
				return nil, err
			}
			return v, nil
		},
	}
}

// Encode returns the JSON encoding of a.
func Encode(a Attributes) ([]byte, error) {
	if a == nil {
		return nil, fmt.Errorf("encode event: nil attributes")
	}
	b, err := json.Marshal(a)
	if err != nil {
		return nil, fmt.Errorf("encode %s event: %w", a.EventType(), err)
	}
	return b, nil
}

// Decode parses the attributes of an event of type typ. It returns an error for
// an unknown type or data that does not match the type's fields.
func Decode(typ string, data []byte) (Attributes, error) {
	dec, ok := decoders[typ]
	if !ok {
		return nil, fmt.Errorf("decode event: unknown event type %q", typ)
	}
	a, err := dec.bytes(data)
	if err != nil {
		return nil, fmt.Errorf("decode %s event: %w", typ, err)
	}
	return a, nil
}

// eventJSON is the wire form of an Event.
type eventJSON struct {
	ID         int64           `json:"id"`
	Time       time.Time       `json:"time"`
	Type       string          `json:"type"`
	Attributes json.RawMessage `json:"attributes"`
}

// MarshalJSON encodes the event with its type and attributes.
func (e Event) MarshalJSON() ([]byte, error) {
	attrs, err := Encode(e.Attributes)
	if err != nil {
		return nil, err
	}
	return json.Marshal(eventJSON{ID: e.ID, Time: e.Time, Type: e.Type(), Attributes: attrs})
}

// UnmarshalJSON decodes an event written by MarshalJSON.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w eventJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return fmt.Errorf("decode event: %w", err)
	}
	ev, err := w.event()
	if err != nil {
		return err
	}
	*e = ev
	return nil
}

// event returns the event w holds, its attributes decoded.
func (w eventJSON) event() (Event, error) {
	a, err := Decode(w.Type, w.Attributes)
	if err != nil {
		return Event{}, fmt.Errorf("event %d: %w", w.ID, err)
	}
	return Event{ID: w.ID, Time: w.Time, Attributes: a}, nil
}

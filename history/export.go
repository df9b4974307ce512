package history

import (
	"encoding/json"
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

// Import reads a history written by Export and checks it: a known version,
// events numbered 1..n, the first a WorkflowStarted.
func Import(r io.Reader) (History, error) {
	var h History
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return h, fmt.Errorf("import history: %w", err)
	}
	if dec.More() {
		return h, fmt.Errorf("import history: trailing data after the history")
	}
	if h.Version != FormatVersion {
		return h, fmt.Errorf("import history: format version %d, this build reads version %d", h.Version, FormatVersion)
	}
	if err := h.Validate(); err != nil {
		return h, fmt.Errorf("import history: %w", err)
	}
	return h, nil
}

// Validate checks that the events are numbered 1..n and start with a
// WorkflowStarted.
func (h History) Validate() error {
	if len(h.Events) == 0 {
		return fmt.Errorf("run %s: no events", h.RunID)
	}
	if _, ok := h.Events[0].Attributes.(WorkflowStarted); !ok {
		return fmt.Errorf("run %s: event 1 is %s, not workflow_started", h.RunID, h.Events[0].Type())
	}
	for i, e := range h.Events {
		if e.ID != int64(i+1) {
			return fmt.Errorf("run %s: event %d has ID %d", h.RunID, i+1, e.ID)
		}
	}
	return nil
}

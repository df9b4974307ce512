package workflow

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// SetQueryHandler registers fn to answer queries named name
// (engine.Query). The handler reads the workflow's state and returns it; it
// must not block, and must not start activities, timers or anything else
// (such a handler is rejected with an error). Register handlers early, before
// the workflow's first blocking call, so replay sees them.
func SetQueryHandler[T any](ctx Context, name string, fn func() (T, error)) error {
	x := ctx.exec()
	if name == "" {
		return fmt.Errorf("set query handler: empty name")
	}
	x.queries[name] = func() (json.RawMessage, error) {
		v, err := fn()
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
	return nil
}

// Query runs the handler registered under name against the state the run
// has reached, and returns its encoded answer.
func (x *executor) Query(name string) (out json.RawMessage, err error) {
	fn, ok := x.queries[name]
	if !ok {
		known := make([]string, 0, len(x.queries))
		for n := range x.queries {
			known = append(known, n)
		}
		slices.Sort(known)
		return nil, fmt.Errorf("query %q: the workflow has no handler for it (it has: %s)", name, strings.Join(known, ", "))
	}
	before := len(x.pending)
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("query %q: the handler must not block or panic: %v", name, r)
		}
	}()
	out, err = fn()
	if len(x.pending) != before {
		return nil, fmt.Errorf("query %q: the handler changed the workflow (it scheduled work); handlers must only read", name)
	}
	return out, err
}

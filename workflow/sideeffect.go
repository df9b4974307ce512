package workflow

import (
	"encoding/json"
	"fmt"

	"github.com/durable-go/durable/history"
)

// SideEffect runs fn once and records its result in history; on replay it
// returns the recorded value without calling fn. Use it for small
// non-deterministic values such as a random ID. fn must not fail or block;
// anything that can fail belongs in an activity.
func SideEffect[T any](ctx Context, fn func() T) T {
	x := ctx.exec()
	seq := x.nextSeq()
	var v T
	raw, ok := x.recorded[seq]
	if ok {
		delete(x.recorded, seq)
		if err := json.Unmarshal(raw, &v); err != nil {
			panic(fmt.Sprintf("workflow: side effect %d: recorded value does not decode into %T: %v", seq, v, err))
		}
	} else {
		v = fn()
		b, err := json.Marshal(v)
		if err != nil {
			panic(fmt.Sprintf("workflow: side effect %d: value of type %T does not encode: %v", seq, v, err))
		}
		raw = b
	}
	x.command(history.SideEffectRecorded{Seq: seq, Value: raw})
	return v
}

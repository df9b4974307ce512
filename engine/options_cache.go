package engine

import (
	"encoding/json"
	"sync"
	"sync/atomic"

	"github.com/durable-go/durable/activity"
)

// optionsCache keeps decoded activity options by their recorded JSON. A
// workflow schedules its activities with the same few option sets over and
// over, and each is decoded twice per activity (when scheduled and when
// run), which was 8% of the engine's CPU in W1. The cache stops growing at
// maxCachedOptions distinct sets.
var optionsCache struct {
	m sync.Map // string(JSON) -> activity.Options
	n atomic.Int64
}

const maxCachedOptions = 4096

// decodeActivityOptions decodes an activity's recorded options; empty means
// the zero Options.
func decodeActivityOptions(raw json.RawMessage) (activity.Options, error) {
	var o activity.Options
	if len(raw) == 0 {
		return o, nil
	}
	if v, ok := optionsCache.m.Load(string(raw)); ok {
		return v.(activity.Options), nil
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return activity.Options{}, err
	}
	if optionsCache.n.Load() < maxCachedOptions {
		if _, loaded := optionsCache.m.LoadOrStore(string(raw), o); !loaded {
			optionsCache.n.Add(1)
		}
	}
	return o, nil
}

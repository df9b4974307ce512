package engine

import (
	"encoding/json"
	"sync"

	"github.com/durable-go/durable/activity"
)

// optionsCache keeps decoded activity options by their recorded JSON. A
// workflow schedules its activities with the same few option sets over and
// over, and each is decoded twice per activity (when scheduled and when
// run), which was 8% of the engine's CPU in W1. The cache stops growing at
// maxCachedOptions distinct sets.
// A map under a read lock, not a sync.Map: a lookup by string(raw) in a
// plain map does not copy the key, where sync.Map's any key did (2% of the
// engine's allocations in W1).
var optionsCache struct {
	mu sync.RWMutex
	m  map[string]activity.Options // by JSON
}

const maxCachedOptions = 4096

// decodeActivityOptions decodes an activity's recorded options; empty means
// the zero Options.
func decodeActivityOptions(raw json.RawMessage) (activity.Options, error) {
	var o activity.Options
	if len(raw) == 0 {
		return o, nil
	}
	optionsCache.mu.RLock()
	o, ok := optionsCache.m[string(raw)]
	optionsCache.mu.RUnlock()
	if ok {
		return o, nil
	}
	if err := json.Unmarshal(raw, &o); err != nil {
		return activity.Options{}, err
	}
	optionsCache.mu.Lock()
	if optionsCache.m == nil {
		optionsCache.m = map[string]activity.Options{}
	}
	if len(optionsCache.m) < maxCachedOptions {
		optionsCache.m[string(raw)] = o
	}
	optionsCache.mu.Unlock()
	return o, nil
}

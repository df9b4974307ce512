package workflow

import (
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/durable-go/durable/activity"
)

// encodedOptions keeps the JSON of the activity options that workflows
// schedule with. A workflow schedules its activities with the same few
// option sets over and over, replays included, and encoding them by
// reflection was 4% of the engine's CPU in the W1 benchmark; formatting the
// backoff coefficient also grew every new workflow goroutine's stack
// (docs/performance.md, item 42). The cache stops growing at
// maxEncodedOptions distinct sets; past that, options are encoded each time.
// A map under a read lock, as in the engine's cache of decoded options.
var encodedOptions struct {
	mu sync.RWMutex
	m  map[optionsKey]json.RawMessage
}

const maxEncodedOptions = 4096

// optionsKey is activity.Options in a comparable form: the list of
// non-retryable error types joined into one string. TestOptionsKeyCoversEveryField
// fails when a field is added to activity.Options or activity.RetryPolicy and
// not here.
type optionsKey struct {
	name, queue                                string
	startToClose, scheduleToClose, heartbeat   time.Duration
	scheduleToStart                            time.Duration
	waitForCancellation                        bool
	initialInterval, maximumInterval           time.Duration
	backoffCoefficient                         float64
	maximumAttempts, maximumRateLimitedRetries int
	nonRetryable                               string // joined by "\x00" (none contains it: see encodeOptions)
	nonRetryableCount                          int    // so that none and one "" differ
}

func keyOf(o activity.Options) optionsKey {
	return optionsKey{
		name: o.Name, queue: o.Queue,
		startToClose: o.StartToCloseTimeout, scheduleToClose: o.ScheduleToCloseTimeout, heartbeat: o.HeartbeatTimeout,
		scheduleToStart: o.ScheduleToStartTimeout, waitForCancellation: o.WaitForCancellation,
		initialInterval: o.Retry.InitialInterval, maximumInterval: o.Retry.MaximumInterval,
		backoffCoefficient: o.Retry.BackoffCoefficient,
		maximumAttempts:    o.Retry.MaximumAttempts, maximumRateLimitedRetries: o.Retry.MaximumRateLimitedRetries,
		nonRetryable:      strings.Join(o.Retry.NonRetryableErrorTypes, "\x00"),
		nonRetryableCount: len(o.Retry.NonRetryableErrorTypes),
	}
}

// encodeOptions returns the JSON of o, as json.Marshal does. The caller must
// not modify the result: it may be shared.
func encodeOptions(o activity.Options) (json.RawMessage, error) {
	if slices.ContainsFunc(o.Retry.NonRetryableErrorTypes, func(t string) bool { return strings.Contains(t, "\x00") }) {
		return json.Marshal(o) // the joined key would be ambiguous
	}
	k := keyOf(o)
	encodedOptions.mu.RLock()
	b, ok := encodedOptions.m[k]
	encodedOptions.mu.RUnlock()
	if ok {
		return b, nil
	}
	b, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	b = b[:len(b):len(b)] // an append by a holder copies
	encodedOptions.mu.Lock()
	if encodedOptions.m == nil {
		encodedOptions.m = map[optionsKey]json.RawMessage{}
	}
	if len(encodedOptions.m) < maxEncodedOptions {
		encodedOptions.m[k] = b
	}
	encodedOptions.mu.Unlock()
	return b, nil
}

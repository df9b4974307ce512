package engine

import (
	"fmt"

	"github.com/durable-go/durable/internal/store"
)

// maxReasonLen is the longest cancel or terminate reason accepted, in
// bytes, as for a workflow ID.
const maxReasonLen = maxIDLen

// checkReason validates a cancel or terminate reason and returns it as it
// is recorded: a NUL byte or invalid UTF-8 in it escaped
// (store.EscapeText), so that the request is recorded whatever it says.
func checkReason(reason string) (string, error) {
	if len(reason) > maxReasonLen {
		return "", fmt.Errorf("reason is %d bytes, the limit is %d: shorten it", len(reason), maxReasonLen)
	}
	return store.EscapeText(reason), nil
}

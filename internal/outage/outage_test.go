package outage

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An outage is logged once when it begins, at Warn, each retry at Debug,
// and once when it ends, at Info; a success without an outage logs nothing.
func TestAnOutageIsLoggedOnce(t *testing.T) {
	var buf bytes.Buffer
	l := New(slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	ctx := context.Background()
	l.OK(ctx, "claim")
	require.Empty(t, buf.String(), "no outage: nothing to say")
	for range 3 {
		l.Fail(ctx, "claim", errors.New("connection refused"), time.Second)
	}
	l.OK(ctx, "claim")
	l.OK(ctx, "claim")
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	require.Equal(t, 2, strings.Count(out, "level=DEBUG"), out)
	require.Equal(t, 1, strings.Count(out, "level=INFO"), out)
	require.Contains(t, out, "failures=3")
}

package activity_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/activity"
)

// codeError is an error type of the test's own, with a value receiver.
type codeError struct{ code int }

func (e codeError) Error() string { return fmt.Sprintf("code %d", e.code) }

func TestNilErrors(t *testing.T) {
	t.Parallel()

	require.NoError(t, activity.Permanent(nil))
	require.NoError(t, activity.RateLimited(nil, time.Second))
	require.False(t, activity.IsPermanent(nil))
	after, ok := activity.RetryAfter(nil)
	require.False(t, ok)
	require.Zero(t, after)
	require.Empty(t, activity.ErrorClass(nil))
}

func TestPermanent(t *testing.T) {
	t.Parallel()

	base := errors.New("card declined")
	err := activity.Permanent(base)
	require.EqualError(t, err, "card declined", "prints as the wrapped error")
	require.ErrorIs(t, err, base)
	require.Same(t, base, errors.Unwrap(err))
	require.True(t, activity.IsPermanent(err))
	_, ok := activity.RetryAfter(err)
	require.False(t, ok)

	wrapped := fmt.Errorf("charge order 7: %w", err)
	require.True(t, activity.IsPermanent(wrapped), "found through fmt.Errorf %%w")
	require.ErrorIs(t, wrapped, base)
	require.EqualError(t, wrapped, "charge order 7: card declined")

	require.False(t, activity.IsPermanent(base))
	require.False(t, activity.IsPermanent(fmt.Errorf("charge: %v", err)), "%%v does not wrap")
}

func TestRateLimited(t *testing.T) {
	t.Parallel()

	base := errors.New("429 too many requests")
	err := activity.RateLimited(base, 3*time.Second)
	require.EqualError(t, err, "429 too many requests (retry after 3s)")
	require.ErrorIs(t, err, base)
	require.Same(t, base, errors.Unwrap(err))
	require.False(t, activity.IsPermanent(err))

	after, ok := activity.RetryAfter(err)
	require.True(t, ok)
	require.Equal(t, 3*time.Second, after)

	after, ok = activity.RetryAfter(fmt.Errorf("call api: %w", err))
	require.True(t, ok, "found through fmt.Errorf %%w")
	require.Equal(t, 3*time.Second, after)

	after, ok = activity.RetryAfter(activity.RateLimited(base, -time.Second))
	require.True(t, ok)
	require.Zero(t, after, "a negative retryAfter counts as 0")

	after, ok = activity.RetryAfter(activity.RateLimited(activity.RateLimited(base, time.Second), time.Minute))
	require.True(t, ok)
	require.Equal(t, time.Minute, after, "the outermost RateLimited counts")

	_, ok = activity.RetryAfter(base)
	require.False(t, ok)
}

func TestErrorsAsThroughWrappers(t *testing.T) {
	t.Parallel()

	_, err := os.Open(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, err)

	for name, wrapped := range map[string]error{
		"permanent":         activity.Permanent(err),
		"rate limited":      activity.RateLimited(err, time.Second),
		"wrapped permanent": fmt.Errorf("read config: %w", activity.Permanent(fmt.Errorf("open: %w", err))),
		"both":              activity.Permanent(activity.RateLimited(err, time.Second)),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			pathErr, ok := errors.AsType[*fs.PathError](wrapped)
			require.True(t, ok, "errors.As finds *fs.PathError through %T", wrapped)
			require.Equal(t, "open", pathErr.Op)
			require.ErrorIs(t, wrapped, fs.ErrNotExist)
			require.ErrorIs(t, wrapped, err)
		})
	}

	code, ok := errors.AsType[codeError](activity.Permanent(codeError{code: 42}))
	require.True(t, ok)
	require.Equal(t, 42, code.code)
}

func TestErrorClass(t *testing.T) {
	t.Parallel()

	_, pathErr := os.Open(filepath.Join(t.TempDir(), "missing"))
	require.Error(t, pathErr)
	base := errors.New("boom")

	tests := []struct {
		name string
		err  error
		want string
	}{
		{name: "errors.New", err: base, want: "*errors.errorString"},
		{name: "fmt.Errorf without %w", err: fmt.Errorf("boom %d", 1), want: "*errors.errorString"},
		{name: "fmt.Errorf with %w", err: fmt.Errorf("load: %w", base), want: "*errors.errorString"},
		{name: "path error", err: pathErr, want: "*fs.PathError"},
		{name: "wrapped path error", err: fmt.Errorf("a: %w", fmt.Errorf("b: %w", pathErr)), want: "*fs.PathError"},
		{name: "custom wrapper named itself", err: fmt.Errorf("x: %w", &fs.PathError{Op: "open", Err: codeError{code: 2}}), want: "*fs.PathError"},
		{name: "wrapped nil", err: fmt.Errorf("x: %w", nil), want: "*fmt.wrapError"},
		{name: "value type", err: fmt.Errorf("x: %w", codeError{code: 1}), want: "activity_test.codeError"},
		{name: "context canceled", err: fmt.Errorf("call: %w", context.Canceled), want: "*errors.errorString"},
		{name: "deadline exceeded", err: context.DeadlineExceeded, want: "context.deadlineExceededError"},
		{name: "join is its own innermost", err: errors.Join(base, pathErr), want: "*errors.joinError"},
		{name: "two %w is its own innermost", err: fmt.Errorf("%w; %w", base, pathErr), want: "*fmt.wrapErrors"},
		{name: "permanent", err: activity.Permanent(pathErr), want: "permanent"},
		{name: "wrapped permanent", err: fmt.Errorf("x: %w", activity.Permanent(base)), want: "permanent"},
		{name: "rate limited", err: activity.RateLimited(pathErr, time.Second), want: "rate_limited"},
		{name: "wrapped rate limited", err: fmt.Errorf("x: %w", activity.RateLimited(base, time.Second)), want: "rate_limited"},
		{name: "permanent wins over rate limited", err: activity.RateLimited(activity.Permanent(base), time.Second), want: "permanent"},
		{name: "permanent inside join", err: errors.Join(base, activity.Permanent(pathErr)), want: "permanent"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, tt.want, activity.ErrorClass(tt.err))
		})
	}
}

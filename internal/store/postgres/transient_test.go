package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/internal/store"
)

func TestTransient(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&pgconn.PgError{Code: "57P01"}, true},  // terminated by an administrator
		{&pgconn.PgError{Code: "08006"}, true},  // connection failure
		{&pgconn.PgError{Code: "40P01"}, true},  // deadlock
		{&pgconn.PgError{Code: "53300"}, true},  // too many clients
		{&pgconn.PgError{Code: "23505"}, false}, // unique violation: an answer
		{&pgconn.PgError{Code: "42P01"}, false}, // undefined table: an answer
		{fmt.Errorf("get run: %w", pgconn.ErrConnClosed), true},
		{fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{context.DeadlineExceeded, true},
		{context.Canceled, false},
		{store.ErrNotFound, false},
		{codec.ErrNoCodec, false},
		{errors.New("decode event 2: unknown field"), false},
		{nil, false},
	} {
		require.Equal(t, tc.want, new(Store).Transient(tc.err), "%v", tc.err)
	}
}

package store_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/store"
)

func TestEscapeText(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"plain", "card declined", "card declined"},
		{"unicode and backslashes stay", `日本語 🚀 \x00 \u0000 �`, `日本語 🚀 \x00 \u0000 �`},
		{"NUL", "a\x00b", `a\x00b`},
		{"invalid byte", "a\xffb", `a\xffb`},
		{"truncated rune", "end \xe6\x97", `end \xe6\x97`},
		{"both", "\x00\xfe日\x00", `\x00\xfe日\x00`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := store.EscapeText(tt.in)
			require.Equal(t, tt.want, got)
			require.True(t, utf8.ValidString(got))
			require.NotContains(t, got, "\x00")
			require.Equal(t, got, store.EscapeText(got), "escaping twice changes nothing")
		})
	}
}

func TestCheckPayload(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, want string
	}{
		{"plain", `{"a":"b"}`, ""},
		{"escaped backslash then u0000", `"\\u0000"`, ""},
		{"other escapes", `"\u0001\n\\\""`, ""},
		{"NUL", `{"a":"x\u0000y"}`, "NUL character"},
		{"NUL after an escaped backslash", `"\\\u0000"`, "NUL character"},
		{"raw NUL", "\"\x00\"", "NUL character"},
		{"invalid UTF-8", "\"\xff\"", "not valid UTF-8"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			err := store.CheckPayload([]byte(tt.in))
			if tt.want == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tt.want)
			require.ErrorIs(t, err, store.ErrUnstorable)
		})
	}
	require.NoError(t, store.CheckPayload([]byte(`"`+strings.Repeat(`\\u0000`, 100)+`"`)))
}

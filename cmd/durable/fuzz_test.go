package main

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// The fuzzers of the CLI's parsers of user input (flag values and
// arguments) and of its cleaning of stored text (IDs, errors) for the
// terminal. Seeds are here and in testdata/fuzz.

// printable reports whether s is safe on a terminal: no control or other
// non-printing characters but those in allowed.
func printable(s, allowed string) bool {
	return !strings.ContainsFunc(s, func(r rune) bool {
		return !unicode.IsPrint(r) && r != ' ' && !strings.ContainsRune(allowed, r)
	})
}

// requireUsage requires err to be a usage error (exit code 2) naming flag.
func requireUsage(t *testing.T, err error, flag string) {
	t.Helper()
	var ee *exitError
	require.True(t, errors.As(err, &ee))
	require.Equal(t, exitUsage, ee.code)
	require.Contains(t, err.Error(), flag)
}

// FuzzParseSince: --since never panics; a duration or a number of days
// gives a time no later than now, and anything refused is a usage error.
func FuzzParseSince(f *testing.F) {
	for _, s := range []string{"24h", "90m", "7d", "0d", "2024-05-01", "2024-05-01T00:00:00Z", "2024-05-01T10:00:00.123+02:00", "-1h", "d", "1e9d", "", "yesterday", "106751d", "106752d", "9223372036854775807d", "106751991167300d"} {
		f.Add(s)
	}
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		got, err := parseSince(s, now)
		if err != nil {
			requireUsage(t, err, "--since")
			return
		}
		if _, perr := time.ParseDuration(s); perr == nil {
			require.False(t, got.After(now), "%q is a time back from now", s)
		}
		if days, ok := strings.CutSuffix(s, "d"); ok {
			if _, aerr := strconv.Atoi(days); aerr == nil {
				require.False(t, got.After(now), "%q is a time back from now", s)
			}
		}
	})
}

// FuzzParseWindow: --window never panics, and what it accepts is positive.
func FuzzParseWindow(f *testing.F) {
	for _, s := range []string{"1h", "90m", "7d", "0d", "0s", "-5m", "1.5h", "9223372036854775807ns", "106751d", "106752d", "9223372036854775807d", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseWindow(s)
		if err != nil {
			requireUsage(t, err, "--window")
			return
		}
		require.Positive(t, d, "window %q", s)
	})
}

// FuzzParseDeadLetterID: a dead-letter ID argument is a positive number or
// a not-found error that quotes it.
func FuzzParseDeadLetterID(f *testing.F) {
	for _, s := range []string{"1", "42", "0", "-3", "+7", "007", "9223372036854775808", "1e3", "", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := parseDeadLetterID(s)
		if err != nil {
			var ee *exitError
			require.True(t, errors.As(err, &ee))
			require.Equal(t, exitNotFound, ee.code)
			require.Contains(t, err.Error(), strconv.Quote(s))
			return
		}
		require.GreaterOrEqual(t, id, int64(1))
		n, perr := strconv.ParseInt(s, 10, 64)
		require.NoError(t, perr)
		require.Equal(t, n, id)
	})
}

// FuzzClean: text from the database (IDs, names, errors, stacks) prints
// without control characters, and clean loses nothing.
func FuzzClean(f *testing.F) {
	for _, s := range []string{"order-1", "", "a\x1b[31mred", "line1\nline2\tx", "\x00", "é😀", "\xff\xfe", "trailing\n\n", "\u202eevil"} {
		f.Add(s, 20)
	}
	f.Fuzz(func(t *testing.T, s string, n int) {
		c := clean(s)
		require.True(t, printable(c, ""), "clean(%q) = %q", s, c)
		if c != s {
			u, err := strconv.Unquote(c)
			require.NoError(t, err)
			require.Equal(t, s, u, "clean quotes losslessly")
		}
		require.True(t, printable(cleanLines(s, "  "), "\n"), "cleanLines(%q)", s)

		n = 1 + int(uint(n)%200)
		line := firstLine(s, n)
		require.True(t, printable(line, ""), "firstLine(%q)", s)
		require.NotContains(t, line, "\n")
		require.LessOrEqual(t, utf8.RuneCountInString(truncate(s, n)), n, "truncate(%q, %d)", s, n)
		_ = payload([]byte(s)) // never panics
	})
}

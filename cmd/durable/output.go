package main

import (
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode"
)

// writeJSON writes v as indented JSON and a newline.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// formatTime formats t for people: local time, to the second.
func formatTime(t time.Time) string {
	return t.Local().Format(time.RFC3339)
}

// formatTimeMillis is formatTime to the millisecond, for events that follow
// each other closely.
func formatTimeMillis(t time.Time) string {
	return t.Local().Format("2006-01-02T15:04:05.000Z07:00")
}

// formatOptTime is formatTime, or "-" for no time.
func formatOptTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return formatTime(*t)
}

// relative says how far t is from now: "in 59m0s" or "3s ago".
func relative(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	switch {
	case d > 0:
		return "in " + d.String()
	case d < 0:
		return (-d).String() + " ago"
	}
	return "now"
}

// clean makes s, which may come from users (IDs, error messages), safe to
// print on one line of a terminal: it quotes s if it holds control
// characters or is empty.
func clean(s string) string {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
		return strconv.Quote(s)
	}
	return s
}

// cleanLines is clean for text that may span lines (an error with a stack
// trace): it keeps newlines and tabs, escapes other control characters, and
// indents every line after the first by indent.
func cleanLines(s, indent string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		l = strings.ReplaceAll(l, "\t", "    ")
		if strings.ContainsFunc(l, func(r rune) bool { return !unicode.IsPrint(r) && r != ' ' }) {
			q := strconv.Quote(l)
			l = q[1 : len(q)-1]
		}
		if i > 0 {
			l = indent + l
		}
		lines[i] = l
	}
	return strings.Join(lines, "\n")
}

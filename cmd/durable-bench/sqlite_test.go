package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// On SQLite, the short run runs W1 to W5 in a fresh file, which it removes
// at the end, and skips what SQLite cannot do, saying why in the JSON lines
// and in the table.
func TestShortRunSQLite(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(t.Context(), 55*time.Second)
	defer cancel()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"-short", "-store", "sqlite"}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())

	file := afterPrefix(t, stderr.String(), "SQLite file ")
	require.NoDirExists(t, filepath.Dir(file), "the driver removes its SQLite file's directory")

	jsonLines, table := splitOutput(stdout.String())
	require.Len(t, jsonLines, len(allWorkloads), "one JSON line per workload:\n%s", stdout.String())
	got := parseLines(t, jsonLines)
	for _, w := range allWorkloads {
		require.Contains(t, got, w)
		require.Equal(t, "sqlite", got[w]["store"], "%s names its store", w)
	}

	w1 := got["W1"]
	requireLoad(t, w1, 50)
	require.NotContains(t, w1, "xact_commits", "no fake commit count")
	require.NotContains(t, w1, "commits_per_step", "no fake commit count")
	require.Equal(t, "xact_commits, commits_per_step: "+whyNoCommitCount, w1["skipped"])

	w2 := got["W2"]
	require.InDelta(t, 20.0, field[float64](t, w2, "runs"), 0)
	requireLatency(t, field[map[string]any](t, w2, "in_process"))
	require.NotContains(t, w2, "cross_process")
	require.NotContains(t, w2, "cross_process_listening")
	require.Equal(t, "cross_process, cross_process_listening: "+whyCrossProcess, w2["skipped"])

	w3 := got["W3"]
	require.InDelta(t, 20.0, field[float64](t, w3, "runs"), 0)
	lateness := field[map[string]any](t, w3, "lateness")
	requireLatency(t, lateness)
	require.NotContains(t, w3, "skipped", "W3 runs whole on SQLite")

	w4 := got["W4"]
	require.InDelta(t, 1000.0, field[float64](t, w4, "database_events"), 0, "the recorded run has as many events as the built one")
	requireLatency(t, field[map[string]any](t, w4, "cached_step"))
	require.NotContains(t, w4, "skipped")

	w5 := got["W5"]
	require.InDelta(t, 200.0, field[float64](t, w5, "runs"), 0)
	require.Positive(t, field[float64](t, w5, "db_bytes_per_run"), "the file grows with the sleeping runs")
	require.NotContains(t, w5, "skipped")

	require.Equal(t, map[string]any{"store": "sqlite", "workload": "W6", "skipped": whyProcesses}, got["W6"],
		"W6 is skipped whole, with no figure")

	for _, why := range []string{whyNoCommitCount, whyCrossProcess, whyProcesses} {
		require.Contains(t, table, "skipped: "+why+"\n")
	}
	require.Equal(t, 2, strings.Count(table, "skipped: "+whyCrossProcess), "W2's two cross-process rows")
	require.Contains(t, table, "p99.9 ", "the table shows the tails")
}

// With -keep, the SQLite file stays, its schema in it even if no workload
// ran, and its path is printed on standard error, with -json-only too.
func TestSQLiteKeep(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := run(t.Context(), []string{"-store", "sqlite", "-keep", "-json-only", "-workloads", "W6"}, &stdout, &stderr)
	require.NoError(t, err, "stderr:\n%s", stderr.String())
	file := afterPrefix(t, stderr.String(), "kept SQLite file ")
	t.Cleanup(func() { require.NoError(t, os.RemoveAll(filepath.Dir(file))) })

	got := parseLines(t, strings.Split(strings.TrimSpace(stdout.String()), "\n"))
	require.Len(t, got, 1, "only W6's line on standard output:\n%s", stdout.String())
	require.Equal(t, whyProcesses, got["W6"]["skipped"])

	b, err := os.ReadFile(file)
	require.NoError(t, err)
	require.True(t, bytes.HasPrefix(b, []byte("SQLite format 3\x00")), "%s is a SQLite database", file)
}

// splitOutput splits the driver's standard output into its JSON lines and
// the table after them.
func splitOutput(out string) (jsonLines []string, table string) {
	lines := strings.SplitAfter(out, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], "{") {
		jsonLines = append(jsonLines, strings.TrimSuffix(lines[i], "\n"))
		i++
	}
	return jsonLines, strings.Join(lines[i:], "")
}

// afterPrefix returns the rest of the one line of s that begins with
// prefix.
func afterPrefix(t *testing.T, s, prefix string) string {
	t.Helper()
	var found []string
	for line := range strings.Lines(s) {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			found = append(found, strings.TrimSuffix(rest, "\n"))
		}
	}
	require.Len(t, found, 1, "one line %q... in:\n%s", prefix, s)
	return found[0]
}

package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/pgtest"
)

// binary is the durable command, built once for all tests.
var binary string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "durable-cmd-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	binary = filepath.Join(dir, "durable")
	if out, err := exec.Command("go", "build", "-o", binary, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build durable: %v\n%s", err, out)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			return 1
		}
	}
	return code
}

// unreachable is a database URL nothing listens on.
const unreachable = "postgres://postgres@127.0.0.1:1/x?connect_timeout=2"

// result is what one run of the binary did.
type result struct {
	code           int
	stdout, stderr string
}

// durable runs the binary on database db (none if empty) with args.
func durable(t *testing.T, db string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if db != "" {
		args = append([]string{"--db", db}, args...)
	}
	cmd := exec.CommandContext(ctx, binary, args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{stdout: stdout.String(), stderr: stderr.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		r.code = ee.ExitCode()
	} else {
		require.NoError(t, err, "run durable %v", args)
	}
	return r
}

// requireCode fails unless r exited with code.
func requireCode(t *testing.T, code int, r result) {
	t.Helper()
	require.Equal(t, code, r.code, "exit code; stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
}

// emptyDatabase creates a database with no schema and returns its URL.
func emptyDatabase(t *testing.T) string { return pgtest.EmptyDatabase(t) }

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		// want is in stderr.
		want string
	}{
		{"UnknownCommand", []string{"bogus"}, `unknown command "bogus" for "durable"`},
		{"UnknownSubcommand", []string{"workflow", "bogus"}, `unknown command "bogus" for "durable workflow"`},
		{"UnknownMigrateSubcommand", []string{"migrate", "bogus"}, `unknown command "bogus" for "durable migrate"`},
		{"UnknownFlag", []string{"workflow", "list", "--bogus"}, "unknown flag: --bogus"},
		{"BadStatus", []string{"workflow", "list", "--status", "done"}, "want one of running, completed"},
		{"BadLimit", []string{"workflow", "list", "--limit", "0"}, "--limit must be at least 1"},
		{"BadLimitType", []string{"workflow", "list", "--limit", "many"}, "--limit"},
		{"BadSince", []string{"workflow", "list", "--since", "yesterday"}, "want an RFC 3339 time"},
		{"DescribeNoID", []string{"workflow", "describe"}, "takes one workflow ID, got 0"},
		{"HistoryTwoIDs", []string{"workflow", "history", "a", "b"}, "takes one workflow ID, got 2"},
		{"BadAfter", []string{"migrate", "print", "--after", "-1"}, "--after must not be negative"},
		{"BadURL", []string{"--db", "postgres://[::1", "workflow", "list"}, "--db is not a valid PostgreSQL URL"},
		// PostgreSQL text holds only UTF-8: no workflow has such an ID.
		{"InvalidUTF8Flag", []string{"workflow", "list", "--id", "a\xffb"}, `argument "a\xffb" is not valid UTF-8`},
		{"InvalidUTF8Arg", []string{"workflow", "describe", "a\xffb"}, `argument "a\xffb" is not valid UTF-8`},
		{"InvalidUTF8Reason", []string{"workflow", "cancel", "x", "--reason=\xff"}, `argument "--reason=\xff" is not valid UTF-8`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			// The database is unreachable: usage is checked before connecting.
			r := durable(t, unreachable, tt.args...)
			requireCode(t, exitUsage, r)
			require.Contains(t, r.stderr, tt.want)
			require.Contains(t, r.stderr, "--help' for usage")
		})
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		args []string
		want []string
	}{
		{"Root", []string{"--help"}, []string{"Exit codes:", "3  not found", "4  database unreachable", "5  schema out of date", "run `durable migrate`"}},
		{"NoArgs", nil, []string{"Available Commands:", "migrate", "workflow"}},
		{"Workflow", []string{"workflow"}, []string{"describe", "history", "list"}},
		{"List", []string{"workflow", "list", "--help"}, []string{"--status", "--since", "--limit", "--type"}},
		{"Describe", []string{"help", "workflow", "describe"}, []string{"--run", "--payloads"}},
		{"Migrate", []string{"migrate", "--help"}, []string{"print", "status"}},
		{"Completion", []string{"completion", "bash"}, []string{"bash completion"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := durable(t, "", tt.args...)
			requireCode(t, exitOK, r)
			for _, w := range tt.want {
				require.Contains(t, r.stdout, w)
			}
		})
	}
}

func TestUnreachableDatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"migrate"},
		{"migrate", "status"},
		{"workflow", "list"},
		{"workflow", "describe", "x"},
		{"--json", "workflow", "history", "x"},
	} {
		t.Run(args[len(args)-1], func(t *testing.T) {
			t.Parallel()
			r := durable(t, unreachable, args...)
			requireCode(t, exitUnreachable, r)
			require.Contains(t, r.stderr, "cannot reach the database at 127.0.0.1:1/x")
			require.Contains(t, r.stderr, "check --db (or DATABASE_URL)")
			require.Empty(t, r.stdout)
		})
	}
}

func TestSchemaBehind(t *testing.T) {
	t.Parallel()
	pool, db := pgtest.PoolURL(t)
	_, err := pool.Exec(t.Context(), "DELETE FROM durable_schema_migrations")
	require.NoError(t, err)

	for _, args := range [][]string{
		{"workflow", "list"},
		{"workflow", "describe", "x"},
		{"workflow", "history", "x"},
		{"migrate", "status"},
	} {
		t.Run(args[1], func(t *testing.T) {
			t.Parallel()
			r := durable(t, db, args...)
			requireCode(t, exitSchema, r)
			require.Contains(t, r.stderr, "database schema is at version 0, this binary needs")
			require.Contains(t, r.stderr, "run `durable migrate`")
		})
	}
}

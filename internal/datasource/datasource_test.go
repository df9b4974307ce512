package datasource

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A DSN picks the store: a postgres URL or libpq's key=value form,
// else a SQLite file; what it cannot read is an error that says what to
// pass.
func TestParse(t *testing.T) {
	tests := []struct {
		dsn, kind, target, err string
	}{
		{dsn: "postgres://u@h:5432/db?sslmode=disable", kind: Postgres, target: "postgres://u@h:5432/db?sslmode=disable"},
		{dsn: "postgresql://h/db", kind: Postgres, target: "postgresql://h/db"},
		{dsn: "host=localhost dbname=app", kind: Postgres, target: "host=localhost dbname=app"},
		{dsn: "durable.db", kind: SQLite, target: "durable.db"},
		{dsn: "/var/lib/app/durable.db", kind: SQLite, target: "/var/lib/app/durable.db"},
		{dsn: "sqlite:dev.db", kind: SQLite, target: "dev.db"},
		{dsn: "sqlite:///tmp/dev.db", kind: SQLite, target: "/tmp/dev.db"},
		{dsn: "file:dev.db", kind: SQLite, target: "dev.db"},
		{dsn: "", err: "empty DSN"},
		{dsn: "mysql://u:secret@h/db", err: `unknown scheme "mysql"`},
		{dsn: "mysql://h/db", err: `unknown scheme "mysql"`},
		{dsn: "sqlite:", err: "no file path"},
		{dsn: "file:dev.db?mode=ro", err: "sets its own connection options"},
	}
	for _, tt := range tests {
		kind, target, err := Parse(tt.dsn)
		if tt.err != "" {
			require.ErrorContains(t, err, tt.err, "dsn %q", tt.dsn)
			require.NotContains(t, err.Error(), "secret", "the DSN may hold a password")
			continue
		}
		require.NoError(t, err, "dsn %q", tt.dsn)
		require.Equal(t, tt.kind, kind, "dsn %q", tt.dsn)
		require.Equal(t, tt.target, target, "dsn %q", tt.dsn)
	}
}

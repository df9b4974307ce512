// Package datasource reads which store a data source name names: the one reading
// of a DSN that engine.Open and the durable CLI share.
package datasource

import (
	"errors"
	"fmt"
	"strings"
)

// The stores a DSN names.
const (
	Postgres = "postgres"
	SQLite   = "sqlite"
)

// Forms says how to name a database, for the errors about one.
const Forms = "pass postgres://user@host:port/database for PostgreSQL, or a file path (or sqlite:PATH) for SQLite"

// ErrEmpty is Parse's error for an empty DSN.
var ErrEmpty = errors.New("empty DSN: " + Forms)

// Parse says which store s names, and what to open it with: the URL (or
// libpq's key=value string) for PostgreSQL, the file's path for SQLite.
// postgres:// and postgresql:// URLs and libpq's key=value form are
// PostgreSQL; sqlite:PATH, sqlite://PATH, file:PATH and a plain path are a
// SQLite file. Its errors never quote s, which may hold a password.
func Parse(s string) (kind, target string, err error) {
	d := strings.TrimSpace(s)
	var path string
	switch {
	case d == "":
		return "", "", ErrEmpty
	case strings.HasPrefix(d, "postgres://"), strings.HasPrefix(d, "postgresql://"):
		return Postgres, d, nil
	case strings.Contains(d, "=") && (strings.HasPrefix(d, "host=") || strings.Contains(d, " dbname=") || strings.HasPrefix(d, "dbname=")):
		return Postgres, d, nil // libpq's key=value form
	case strings.HasPrefix(d, "sqlite://"):
		path = strings.TrimPrefix(d, "sqlite://")
	case strings.HasPrefix(d, "sqlite:"):
		path = strings.TrimPrefix(d, "sqlite:")
	case strings.HasPrefix(d, "file:"):
		path = strings.TrimPrefix(d, "file:")
		if i := strings.IndexByte(path, '?'); i >= 0 {
			return "", "", fmt.Errorf("the SQLite store sets its own connection options: pass the file's path without %q", path[i:])
		}
	case strings.Contains(d, "://"):
		return "", "", fmt.Errorf("unknown scheme %q: %s", d[:strings.Index(d, "://")], Forms)
	default:
		path = d
	}
	if path == "" {
		return "", "", fmt.Errorf("no file path after the scheme: %s", Forms)
	}
	return SQLite, path, nil
}

package postgres

import (
	_ "embed"
	"fmt"
	"strings"
	"text/template"

	"github.com/jackc/pgx/v5"
)

// rolesSQL is the script that creates least-privilege roles for the
// store's tables, with the role names to fill in.
//
//go:embed roles.sql.tmpl
var rolesSQL string

var rolesTemplate = template.Must(template.New("roles").Funcs(template.FuncMap{
	// The caller checks the names (plain lower-case identifiers); they are
	// quoted all the same.
	"ident":   func(s string) string { return pgx.Identifier{s}.Sanitize() },
	"literal": func(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" },
	// The migrations' own table, created as the migrations create it.
	"migrationsTable": func() string { return strings.TrimSpace(CreateMigrationsTable) },
}).Parse(rolesSQL))

// Roles name the three roles of RolesScript.
type Roles struct {
	Owner    string
	Worker   string
	Readonly string
}

// RolesScript returns the SQL script that creates roles r and grants each
// what it needs: the owner owns the tables and migrates them, the worker
// reads and writes rows, the read-only role reads. The names must be plain
// lower-case identifiers: they also appear in the script's DO blocks.
func RolesScript(r Roles) (string, error) {
	var b strings.Builder
	if err := rolesTemplate.Execute(&b, r); err != nil {
		return "", fmt.Errorf("fill in the roles script: %w", err)
	}
	return b.String(), nil
}

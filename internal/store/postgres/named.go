package postgres

import (
	"context"
	"fmt"
	"regexp"
	"sync"

	"github.com/jackc/pgx/v5"
)

// namedArgs are a statement's arguments by name (@name in the SQL), like
// pgx.NamedArgs, but the statement is rewritten to positional parameters
// once per SQL text and cached: pgx.NamedArgs lexes the whole statement on
// every call, which for the large step statements was about an eighth of
// the engine's CPU. A name the SQL uses that the map lacks is an error.
type namedArgs map[string]any

// compiledSQL is a statement rewritten to $n, with the name of each $n.
type compiledSQL struct {
	sql   string
	names []string
}

var (
	compiled   sync.Map // SQL text -> *compiledSQL
	nameTokens = regexp.MustCompile(`@([A-Za-z_][A-Za-z0-9_]*)`)
)

// RewriteQuery implements pgx.QueryRewriter.
func (na namedArgs) RewriteQuery(_ context.Context, _ *pgx.Conn, sql string, _ []any) (string, []any, error) {
	c, err := compileNamed(sql)
	if err != nil {
		return "", nil, err
	}
	args := make([]any, len(c.names))
	for i, name := range c.names {
		v, ok := na[name]
		if !ok {
			return "", nil, fmt.Errorf("postgres store: statement argument @%s not given", name)
		}
		args[i] = v
	}
	return c.sql, args, nil
}

func compileNamed(sql string) (*compiledSQL, error) {
	if c, ok := compiled.Load(sql); ok {
		return c.(*compiledSQL), nil
	}
	// Let pgx's lexer (which knows strings, comments and casts) do the
	// rewrite once, with each candidate name standing for itself.
	probe := pgx.NamedArgs{}
	for _, m := range nameTokens.FindAllStringSubmatch(sql, -1) {
		probe[m[1]] = m[1]
	}
	positional, names, err := probe.RewriteQuery(context.Background(), nil, sql, nil)
	if err != nil {
		return nil, err
	}
	c := &compiledSQL{sql: positional, names: make([]string, len(names))}
	for i, n := range names {
		s, ok := n.(string)
		if !ok {
			return nil, fmt.Errorf("postgres store: cannot name parameter $%d of a statement", i+1)
		}
		c.names[i] = s
	}
	actual, _ := compiled.LoadOrStore(sql, c)
	return actual.(*compiledSQL), nil
}

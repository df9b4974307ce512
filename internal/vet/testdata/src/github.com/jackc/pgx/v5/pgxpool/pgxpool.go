// Package pgxpool is a stub of github.com/jackc/pgx/v5/pgxpool.
package pgxpool

import "context"

type Pool struct{}

func (p *Pool) Exec(ctx context.Context, sql string, args ...any) error { return nil }

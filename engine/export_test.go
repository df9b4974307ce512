package engine

import (
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/store"
)

// NewWrapped is New with wrap between the engine and its store, for the
// package's external tests that watch what an engine asks of its store.
func NewWrapped(pool *pgxpool.Pool, opts Options, wrap func(store.Store) store.Store) (*Engine, error) {
	return newOnPool(pool, opts, wrap)
}

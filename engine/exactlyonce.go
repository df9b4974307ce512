package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/codec"
)

// TxBeginner begins transactions: a *pgxpool.Pool, a *pgx.Conn, or a pgx.Tx
// (for a savepoint).
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// ErrNoIdempotencyKey is returned by ExactlyOnce outside an activity.
var ErrNoIdempotencyKey = errors.New("exactly once: no idempotency key in the context: call it from an activity")

const (
	claimEffectSQL  = `INSERT INTO durable_effects (idempotency_key, created_at) VALUES ($1, now()) ON CONFLICT DO NOTHING`
	recordEffectSQL = `UPDATE durable_effects SET result = $2 WHERE idempotency_key = $1`
	readEffectSQL   = `SELECT result FROM durable_effects WHERE idempotency_key = $1`
)

// ExactlyOnce applies an activity's effects on your own database exactly
// once. It runs fn in a transaction on db that also records the activity's
// idempotency key and fn's result. When an attempt whose transaction
// committed is delivered again (a crash after the commit, a lost lease),
// fn does not run: ExactlyOnce returns the recorded result.
//
// The durable_effects table must be reachable through db: the engine's
// database, or a database where `durable migrate` has run. The recorded
// result is encoded with the engine's Options.Codec, as every payload is.
//
//	func MarkShipped(ctx context.Context, orderID int64) (int64, error) {
//		return engine.ExactlyOnce(ctx, pool, func(ctx context.Context, tx pgx.Tx) (int64, error) {
//			_, err := tx.Exec(ctx, "UPDATE stock SET n = n - 1 WHERE sku = $1", sku)
//			return orderID, err
//		})
//	}
func ExactlyOnce[T any](ctx context.Context, db TxBeginner, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var out T
	key := activity.GetInfo(ctx).IdempotencyKey
	if key == "" {
		return out, ErrNoIdempotencyKey
	}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// A concurrent attempt with the same key waits here for the first
		// to commit or roll back.
		tag, err := tx.Exec(ctx, claimEffectSQL, key)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			var raw []byte
			if err := tx.QueryRow(ctx, readEffectSQL, key).Scan(&raw); err != nil {
				return err
			}
			if len(raw) > 0 {
				p, err := codec.Unwrap(codecFromContext(ctx), raw)
				if err != nil {
					return fmt.Errorf("recorded result: %w", err)
				}
				return json.Unmarshal(p, &out)
			}
			return nil
		}
		v, err := fn(ctx, tx)
		if err != nil {
			return err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return activity.Permanent(fmt.Errorf("encode result: %w", err))
		}
		if b, err = codec.Wrap(codecFromContext(ctx), b); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, recordEffectSQL, key, string(b)); err != nil {
			return err
		}
		out = v
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("exactly once (key %s): %w", key, err)
	}
	return out, nil
}

package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// The exactly-once record (engine.ExactlyOnce): a row per idempotency key
// whose effects committed, in the transaction that applied them, with
// their result.

const (
	claimEffectSQL  = `INSERT INTO durable_effects (idempotency_key, created_at) VALUES ($1, now()) ON CONFLICT DO NOTHING`
	recordEffectSQL = `UPDATE durable_effects SET result = $2 WHERE idempotency_key = $1`
	readEffectSQL   = `SELECT result FROM durable_effects WHERE idempotency_key = $1`
)

// ClaimEffect claims key for the effects tx applies. If an earlier
// transaction committed them, it returns claimed false and the result it
// recorded (nil if none). A concurrent transaction with the same key waits
// here until the first commits or rolls back.
func ClaimEffect(ctx context.Context, tx pgx.Tx, key string) (claimed bool, recorded []byte, err error) {
	tag, err := tx.Exec(ctx, claimEffectSQL, key)
	if err != nil || tag.RowsAffected() == 1 {
		return err == nil, nil, err
	}
	err = tx.QueryRow(ctx, readEffectSQL, key).Scan(&recorded)
	return false, recorded, err
}

// RecordEffect records result as the outcome of the effects of key, which
// tx claimed (ClaimEffect).
func RecordEffect(ctx context.Context, tx pgx.Tx, key string, result []byte) error {
	_, err := tx.Exec(ctx, recordEffectSQL, key, string(result))
	return err
}

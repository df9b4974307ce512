package postgres

import (
	"testing"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/stretchr/testify/require"
)

// Run IDs go to uuid[] parameters in binary. pgx cannot encode a []string
// that way: it fails (formatting an error) and falls back to text.
func TestUUIDArrayEncodesInBinary(t *testing.T) {
	t.Parallel()
	m := pgtype.NewMap()
	ids := []string{"0b1a2d8e-3f4c-4e5a-9b6c-7d8e9f0a1b2c", "6ba7b810-9dad-11d1-80b4-00c04fd430c8"}
	_, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, ids, nil)
	require.Error(t, err, "a []string has no binary encoding for uuid[]")
	b, err := m.Encode(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, uuidArray(ids), nil)
	require.NoError(t, err)
	var back []string
	require.NoError(t, m.Scan(pgtype.UUIDArrayOID, pgtype.BinaryFormatCode, b, &back))
	require.Equal(t, ids, back)

	require.Equal(t, []string{"not-a-uuid"}, uuidArray([]string{"not-a-uuid"}), "left for Postgres to reject")
	require.Equal(t, []pgtype.UUID{}, uuidArray(nil))
}

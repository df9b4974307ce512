package postgres

import (
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgtype"
)

// uuidArray is ids as a uuid[] argument. pgx sends a []string for uuid[] as
// text, and only after it has tried binary and formatted an error saying it
// cannot (with the whole array in it): 2% of the engine's CPU in the W1
// benchmark, and Postgres then parses every element as text. As
// []pgtype.UUID the array goes in binary (not as []uuid.UUID: pgx encodes
// those through their driver.Valuer, as strings). An ID that is not a UUID
// leaves the array as text, for Postgres to report.
func uuidArray(ids []string) any {
	out, bad := parseUUIDs(ids)
	if len(bad) > 0 {
		return arrayArg(ids)
	}
	return out
}

// parseUUIDs splits ids into the UUIDs, in order, and the strings that are
// not UUIDs.
func parseUUIDs(ids []string) (out []pgtype.UUID, bad []string) {
	out = make([]pgtype.UUID, 0, len(ids))
	for _, id := range ids {
		u, err := uuid.Parse(id)
		if err != nil {
			bad = append(bad, id)
			continue
		}
		out = append(out, pgtype.UUID{Bytes: u, Valid: true})
	}
	return out, bad
}

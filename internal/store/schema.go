package store

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Schema is a database's schema version beside the one this build needs.
type Schema struct {
	// Have is the highest migration applied: 0 for a database never
	// migrated.
	Have int
	// Want is the version this build needs.
	Want int
	// Oldest is the oldest version an engine may be built for and run on
	// this schema: the highest Migration.OldestEngine of the migrations
	// applied (a migration applied before the databases recorded it counts
	// as needing its own version).
	Oldest int
}

// Check says whether an engine of this build may run on the schema: nil
// when it is current, or newer and declared safe for this build (the
// engines of a rolling deploy's older release); otherwise an error that
// says what to do.
func (s Schema) Check() error {
	switch {
	case s.Have < s.Want:
		return fmt.Errorf("the database schema is at version %d and this build needs %d: run `durable migrate`, or start an engine without Options.SkipMigrate", s.Have, s.Want)
	case s.Want < s.Oldest:
		return fmt.Errorf("the database schema is at version %d, newer than this build's %d, and its migrations need engines built for version %d or later: upgrade durable in this program (see docs/compatibility.md)", s.Have, s.Want, s.Oldest)
	}
	return nil
}

// EngineRecord is an engine that runs workers on the database, as it last
// said: each running engine records itself when Run starts, again every
// EngineHeartbeat, and forgets itself when Run returns.
type EngineRecord struct {
	WorkerID string `json:"worker_id"`
	// SchemaVersion is the schema version the engine's build needs.
	SchemaVersion int `json:"schema_version"`
	// Build is the durable module version the engine was built with, or
	// "(devel)".
	Build     string    `json:"build"`
	Host      string    `json:"host"`
	PID       int       `json:"pid"`
	StartedAt time.Time `json:"started_at"`
	// SeenAt is the last time it recorded itself, by the database's clock.
	SeenAt time.Time `json:"seen_at"`
}

// How often a running engine records itself, and how long after its last
// record it still counts as running.
const (
	EngineHeartbeat = 10 * time.Second
	EngineLive      = 6 * EngineHeartbeat
)

// MigrationPlan is what migrating the database would do, and which running
// engines it would leave behind.
type MigrationPlan struct {
	Schema Schema
	// Pending are the migrations this build has and the database lacks,
	// in order.
	Pending []Migration
	// Live are the engines seen within EngineLive.
	Live []EngineRecord
	// Blocked are the live engines that a pending migration would leave
	// unable to run: built for a version below its OldestEngine.
	Blocked []EngineRecord
	// Needs is the highest OldestEngine of the pending migrations (0 when
	// none is pending).
	Needs int
}

// PlanMigration returns what s.Migrate would apply and the live engines
// it would break.
func PlanMigration(ctx context.Context, s Store) (MigrationPlan, error) {
	var p MigrationPlan
	var err error
	if p.Schema, err = s.SchemaVersion(ctx); err != nil {
		return p, err
	}
	applied, err := s.ListAppliedMigrations(ctx)
	if err != nil {
		return p, err
	}
	have := make(map[int]bool, len(applied))
	for _, m := range applied {
		have[m.Version] = true
	}
	for _, m := range s.Migrations() {
		if !have[m.Version] {
			p.Pending = append(p.Pending, m)
			p.Needs = max(p.Needs, m.OldestEngine)
		}
	}
	engines, err := s.ListEngines(ctx)
	if err != nil {
		return p, err
	}
	now, err := s.Now(ctx)
	if err != nil {
		return p, err
	}
	for _, e := range engines {
		if now.Sub(e.SeenAt) > EngineLive {
			continue
		}
		p.Live = append(p.Live, e)
		if e.SchemaVersion < p.Needs {
			p.Blocked = append(p.Blocked, e)
		}
	}
	return p, nil
}

// Err is nil when the plan leaves every live engine able to run, and
// otherwise says which migration needs which engines stopped.
func (p MigrationPlan) Err() error {
	if len(p.Blocked) == 0 {
		return nil
	}
	var first Migration
	for _, m := range p.Pending {
		if m.OldestEngine == p.Needs {
			first = m
			break
		}
	}
	names := make([]string, 0, len(p.Blocked))
	for _, e := range p.Blocked {
		names = append(names, fmt.Sprintf("%s (schema %d, build %s)", e.WorkerID, e.SchemaVersion, e.Build))
	}
	return fmt.Errorf("migration %s needs engines built for schema version %d or later, and %d running engine(s) are older: %s; "+
		"stop them (an engine counts as running until %s after its last record) and migrate again, or run `durable migrate --force` and accept that they fail",
		first.Name, p.Needs, len(p.Blocked), strings.Join(names, ", "), EngineLive)
}

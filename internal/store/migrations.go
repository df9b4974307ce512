package store

import (
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
)

// Migration is one versioned, forward-only schema change of a store.
type Migration struct {
	Version int    `json:"version"`
	Name    string `json:"name"`
	SQL     string `json:"sql"`
	// OldestEngine is the oldest schema version an engine may be built
	// for and still run once this migration is applied: Version-1 or
	// lower for a migration that only adds (an engine of the previous
	// release runs on beside it), Version for one that removes or changes
	// what older engines read. A file declares it on a line of its own,
	//
	//	-- durable:oldest-engine 8
	//
	// and a file without one is taken to need engines of its own version.
	OldestEngine int `json:"oldest_engine"`
}

// oldestEngineDirective starts the line of a migration file that declares
// its OldestEngine.
const oldestEngineDirective = "-- durable:oldest-engine "

// ReadMigrations returns the migrations in directory dir of fsys (a
// store's embedded files), in version order: each file is VERSION_NAME.sql.
// It panics on a file without a version or with a bad OldestEngine, which
// the store's tests catch: the files are embedded at build time.
func ReadMigrations(fsys fs.FS, dir string) []Migration {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		panic(err)
	}
	var ms []Migration
	for _, e := range entries {
		name := e.Name()
		num, _, ok := strings.Cut(name, "_")
		v, err := strconv.Atoi(num)
		if !ok || err != nil {
			panic("migration file without a version prefix: " + path.Join(dir, name))
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, name))
		if err != nil {
			panic(err)
		}
		m := Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b), OldestEngine: v}
		for _, line := range strings.Split(m.SQL, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), oldestEngineDirective); ok {
				oldest, err := strconv.Atoi(strings.TrimSpace(rest))
				if err != nil || oldest < 0 || oldest > v {
					panic("migration " + path.Join(dir, name) + ": bad " + strings.TrimSpace(line) + ": want a version from 0 to the file's own")
				}
				m.OldestEngine = oldest
			}
		}
		ms = append(ms, m)
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

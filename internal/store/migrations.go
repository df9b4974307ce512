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
	Version int
	Name    string
	SQL     string
}

// ReadMigrations returns the migrations in directory dir of fsys (a
// store's embedded files), in version order: each file is VERSION_NAME.sql.
// It panics on a file without a version, which the store's tests catch:
// the files are embedded at build time.
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
		ms = append(ms, Migration{Version: v, Name: strings.TrimSuffix(name, ".sql"), SQL: string(b)})
	}
	sort.Slice(ms, func(i, j int) bool { return ms[i].Version < ms[j].Version })
	return ms
}

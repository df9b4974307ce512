package sqlite_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/store/sqlite"
	"github.com/durable-go/durable/internal/store/storetest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// open opens a migrated store on a fresh file of the test's, closed when
// the test ends.
func open(t *testing.T) *sqlite.Store {
	t.Helper()
	s := openAt(t, filepath.Join(t.TempDir(), "durable.db"))
	_, err := s.Migrate(t.Context())
	require.NoError(t, err)
	return s
}

// openAt opens a store on the file at path, closed when the test ends.
func openAt(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(t.Context(), path)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return s
}

func TestStore(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store { return open(t) })
}

// TestStoreGroupCommit runs the suite with group commit started, as the
// engine starts it: it does nothing here, and every guarantee holds.
func TestStoreGroupCommit(t *testing.T) {
	t.Parallel()
	storetest.Run(t, func(t *testing.T) store.Store {
		s := open(t)
		t.Cleanup(s.StartGroupCommit(2, 64))
		return s
	})
}

package sqlite

import (
	"context"
	"database/sql/driver"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Transient implements store.Store: the file locked by another connection
// (SQLITE_BUSY, SQLITE_LOCKED, the WAL's lock protocol), or the file or the
// machine failing for a while (an I/O error, a full disk, no memory, a file
// that cannot be opened), or a call that timed out. None of those says
// anything about the run, and each may pass. A constraint, a canceled call
// (SQLITE_INTERRUPT is what a canceled context makes) and the store's
// sentinels are answers.
func (s *Store) Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff { // the primary code of an extended one
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_PROTOCOL,
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_NOMEM, sqlite3.SQLITE_CANTOPEN:
			return true
		}
		return false
	}
	return errors.Is(err, driver.ErrBadConn) || errors.Is(err, context.DeadlineExceeded)
}

package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/durable-go/durable/internal/store"
)

// Store is the SQLite store. Open makes one; Close releases its file.
type Store struct {
	// w is the writer: one connection, whose transactions begin with
	// BEGIN IMMEDIATE. r is the pool the reads use.
	w, r *sql.DB
	// path is the database file's absolute path: the key of its notes
	// (see notes.go).
	path  string
	notes *noteHub
	// tx, if set, is the transaction of an InTx call this store is bound
	// to: its writes are savepoints of it, its reads go through it, and
	// the notes its writes send wait in held until it commits.
	tx   *sql.Tx
	held *[]store.Note
	// done is closed by Close: it ends the store's Listen calls.
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var _ store.Store = (*Store)(nil)

// busyTimeout is how long a connection waits for a lock another holds (a
// second store's writer on the same file) before it fails with SQLITE_BUSY.
const busyTimeout = 5 * time.Second

// readers is the most connections the store reads on at once.
const readers = 4

// Open opens the SQLite database at path, creating the file if it does not
// exist, and returns a store on it. It does not migrate; see Migrate. The
// store holds the file until Close.
func Open(ctx context.Context, path string) (*Store, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %q: %w", path, err)
	}
	w, err := sql.Open("sqlite", dsn(abs, true))
	if err != nil {
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	// One connection, kept open: every write waits for it, in order.
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	// The first connection creates the file and turns on WAL, which the
	// file keeps: the readers, opened after, find it so.
	if err := w.PingContext(ctx); err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w (is the directory there and writable?)", abs, err)
	}
	r, err := sql.Open("sqlite", dsn(abs, false))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	r.SetMaxOpenConns(readers)
	r.SetMaxIdleConns(readers)
	if err := r.PingContext(ctx); err != nil {
		w.Close()
		r.Close()
		return nil, fmt.Errorf("open sqlite store %s: %w", abs, err)
	}
	// The key of the file's notes: the same file by any path, symbolic
	// links resolved, now that it exists.
	key := abs
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		key = real
	}
	return &Store{w: w, r: r, path: key, notes: joinHub(key), done: make(chan struct{})}, nil
}

// dsn returns the modernc.org/sqlite data source name of the file at path,
// for the writer or a reader. Every connection sets the pragmas that hold
// per connection; journal_mode=WAL, which the file keeps, is set by the
// writer.
func dsn(path string, writer bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", busyTimeout.Milliseconds()))
	q.Add("_pragma", "synchronous(FULL)")
	if writer {
		q.Add("_pragma", "journal_mode(WAL)")
		// database/sql's BeginTx then sends BEGIN IMMEDIATE: the write lock
		// is taken when the transaction begins, not at its first write, so
		// its reads see no other writer's commit before its own.
		q.Set("_txlock", "immediate")
	} else {
		q.Add("_pragma", "query_only(1)")
	}
	// A URI, its path escaped ("?" and "#" may be in a file name) and
	// written with slashes from the root: file:///C:/dir/file.db on
	// Windows.
	p := filepath.ToSlash(path)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	u := url.URL{Scheme: "file", Path: p, RawQuery: q.Encode()}
	return u.String()
}

// Close closes the store's connections and ends its Listen calls. Closing
// twice returns what the first Close did.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.done)
		leaveHub(s.path, s.notes)
		s.closeErr = errors.Join(s.r.Close(), s.w.Close())
	})
	return s.closeErr
}

// errClosed is what a store's Listen returns once the store is closed.
var errClosed = errors.New("the sqlite store is closed")

// write runs fn in a transaction of the writer, and commits it unless fn
// returns an error. Transactions begin with BEGIN IMMEDIATE (see dsn), so
// fn runs alone: no other transaction writes until it ends, in this process
// or another on the same file.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.tx != nil {
		return savepoint(ctx, s.tx, fn)
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin a write: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback() // fn's error says what went wrong
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// savepoint runs fn in a savepoint of tx: its writes are undone if it
// fails, as a write of its own would be, and the transaction goes on.
func savepoint(ctx context.Context, tx *sql.Tx, fn func(tx *sql.Tx) error) error {
	if _, err := tx.ExecContext(ctx, "SAVEPOINT durable_call"); err != nil {
		return fmt.Errorf("begin a write: %w", err)
	}
	if err := fn(tx); err != nil {
		_, _ = tx.ExecContext(ctx, "ROLLBACK TO durable_call") // fn's error says what went wrong; the transaction's end undoes the rest
		_, _ = tx.ExecContext(ctx, "RELEASE durable_call")
		return err
	}
	if _, err := tx.ExecContext(ctx, "RELEASE durable_call"); err != nil {
		return fmt.Errorf("end a write: %w", err)
	}
	return nil
}

// InTx implements store.Store. fn's calls run in one write transaction of
// the writer connection, each call a savepoint of it (all or nothing, as
// alone), and the notes their writes send go out once it commits. fn must
// call the store it is given: a write through s itself would wait for the
// writer connection, which fn's transaction holds, until ctx ends.
func (s *Store) InTx(ctx context.Context, fn func(store.Store) error) error {
	if s.tx != nil {
		return fn(s) // already in one: fn's calls are savepoints of it
	}
	var held []store.Note
	err := s.write(ctx, func(tx *sql.Tx) error {
		return fn(&Store{w: s.w, r: s.r, path: s.path, notes: s.notes, done: s.done, tx: tx, held: &held})
	})
	if err == nil && len(held) > 0 {
		s.notes.send(held)
	}
	return err
}

// Tx returns the transaction of the InTx call s is bound to, or nil: a
// caller's own statements in it take effect with the store's writes.
func (s *Store) Tx() *sql.Tx { return s.tx }

// reader returns what reads go through: the store's transaction if it is
// bound to one (they then see its writes), else the reader pool.
func (s *Store) reader() querier {
	if s.tx != nil {
		return s.tx
	}
	return s.r
}

// send sends notes to the file's listeners now, or, in a transaction, once
// it commits.
func (s *Store) send(notes []store.Note) {
	if s.held != nil {
		*s.held = append(*s.held, notes...)
		return
	}
	s.notes.send(notes)
}

// querier is what both the reader pool and a transaction offer.
type querier interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// queryAll runs a query and returns its rows, each read by scan.
func queryAll[T any](ctx context.Context, q querier, query string, scan func(*sql.Rows) (T, error), args ...any) ([]T, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// affected returns how many rows an exec changed, or its error.
func affected(res sql.Result, err error) (int64, error) {
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// micros is t as the store keeps it: microseconds since the Unix epoch,
// the nanoseconds dropped (as pgx drops them for Postgres).
func micros(t time.Time) int64 { return t.UnixMicro() }

// ceilMicros is t in microseconds, rounded up: a timer's fire time, so that
// a timer never fires before its time (a fire time of 12:00:00.0000005
// kept as 12:00:00.000000 would fire half a microsecond early).
func ceilMicros(t time.Time) int64 {
	us := t.UnixMicro()
	if time.UnixMicro(us).Before(t) {
		us++
	}
	return us
}

// fromMicros is the UTC time of a kept time.
func fromMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }

// nullTime is a kept time that may be NULL, or nil.
func nullTime(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMicros(v.Int64)
	return &t
}

// jsonText is raw JSON as a statement argument: TEXT (a []byte would be a
// BLOB, which SQLite's JSON functions read as its binary JSONB), and JSON
// null for nil, as the Postgres store passes it.
func jsonText(b json.RawMessage) string {
	if len(b) == 0 {
		return "null"
	}
	return string(b)
}

// nullJSON is raw JSON as an argument of a column that may be NULL: nil
// stays NULL.
func nullJSON(b json.RawMessage) any {
	if b == nil {
		return nil
	}
	return string(b)
}

// nullText is s as an argument of a column that may be NULL: "" is NULL.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// jsonList is a list of names as one argument, a JSON array, which the
// statements read with json_each: IN (SELECT value FROM json_each(@list)).
func jsonList[T any](list []T) string {
	if len(list) == 0 {
		return "[]"
	}
	b, err := json.Marshal(list)
	if err != nil {
		panic(err) // strings and integers always encode
	}
	return string(b)
}

// translate maps SQLite's errors to the store's sentinels: a uniqueness
// violation is store.ErrConflict (Postgres's 23505), a value the schema
// refuses (a CHECK: JSON that is not valid) or too big is
// store.ErrUnstorable (Postgres's data exceptions, class 22).
func translate(err error) error {
	var e *sqlite.Error
	if !errors.As(err, &e) {
		return err
	}
	switch code := e.Code(); {
	case code == sqlite3.SQLITE_CONSTRAINT_UNIQUE || code == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY:
		return fmt.Errorf("%w: %s", store.ErrConflict, e.Error())
	case code == sqlite3.SQLITE_CONSTRAINT_CHECK || code&0xff == sqlite3.SQLITE_TOOBIG:
		return fmt.Errorf("%w: %s", store.ErrUnstorable, e.Error())
	}
	return err
}

// Package pgcluster runs a throwaway PostgreSQL cluster of its own, for tests
// that stop, crash and restart the server (the chaos rig) and so must never
// touch a server that others share.
//
// New runs initdb in a new temporary directory with the machine's
// PostgreSQL binaries (the directory `pg_config --bindir` names, or the
// newest /usr/lib/postgresql/*/bin), and starts the server on a free
// localhost port and a unix socket inside that directory, with fsync off: a
// crash of the server loses nothing (the operating system keeps its
// writes), only a crash of the machine would, and then the cluster is
// thrown away anyway. synchronous_commit stays on: with it off, a crash
// (an immediate shutdown) loses the last commits the clients were told had
// succeeded, which a chaos test would rightly count as lost writes.
//
// # Running as root
//
// initdb and postgres refuse to run as root. When the process is root, they
// run as the operating system user "postgres" (the directory is handed to
// it); otherwise as the current user.
//
// # Process lifetime
//
// The server is a child of this process, which asks the kernel to kill it
// if this process dies: a test killed by its timeout leaves no server
// behind. Close stops it and removes the directory.
package pgcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// StopMode is how Stop shuts the server down (pg_ctl stop -m).
type StopMode string

// Shutdown modes.
const (
	// Fast disconnects the clients, rolls back their transactions and
	// shuts down cleanly.
	Fast StopMode = "fast"
	// Immediate kills every server process at once, as a crash would; the
	// next start runs crash recovery.
	Immediate StopMode = "immediate"
)

// Options configure a cluster. The zero value works.
type Options struct {
	// BinDir holds initdb, postgres and pg_ctl. Default: `pg_config
	// --bindir`, else the newest /usr/lib/postgresql/*/bin.
	BinDir string
	// Settings are added to postgresql.conf, over the defaults (fsync off,
	// max_connections 300).
	Settings map[string]string
	// StartTimeout bounds how long Start waits for the server to accept
	// connections. Default 60s.
	StartTimeout time.Duration
}

// Cluster is a PostgreSQL cluster in a temporary directory. Its methods are
// safe for concurrent use.
type Cluster struct {
	bin     string
	base    string // the temporary directory
	data    string
	sock    string
	logPath string
	port    int
	cred    *syscall.Credential // nil: run as ourselves
	timeout time.Duration

	mu     sync.Mutex
	proc   *exec.Cmd
	exited chan struct{} // closed when proc has exited
	closed bool
}

// New creates a cluster in a new temporary directory and starts it.
func New(ctx context.Context, o Options) (*Cluster, error) {
	bin, err := binDir(o.BinDir)
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "pgcluster-")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: make the cluster's directory: %w", err)
	}
	c := &Cluster{
		bin: bin, base: base, data: filepath.Join(base, "data"), sock: filepath.Join(base, "sock"),
		logPath: filepath.Join(base, "postgres.log"), cred: cred, timeout: o.StartTimeout,
	}
	if c.timeout == 0 {
		c.timeout = time.Minute
	}
	if err := c.init(ctx, o.Settings); err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	if err := c.Start(ctx); err != nil {
		_ = os.RemoveAll(base)
		return nil, err
	}
	return c, nil
}

// binDir finds the directory of the PostgreSQL server binaries.
func binDir(dir string) (string, error) {
	if dir == "" {
		if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
			d := strings.TrimSpace(string(out))
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				dir = d
			}
		}
	}
	if dir == "" {
		dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
		slices.SortFunc(dirs, func(a, b string) int { return versionOf(a) - versionOf(b) })
		for _, d := range slices.Backward(dirs) {
			if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
				dir = d
				break
			}
		}
	}
	if dir == "" {
		return "", errors.New("pgcluster: no PostgreSQL server binaries (initdb) found via `pg_config --bindir` or in /usr/lib/postgresql/*/bin: install the PostgreSQL server package (apt-get install postgresql)")
	}
	for _, name := range []string{"initdb", "postgres", "pg_ctl"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			return "", fmt.Errorf("pgcluster: %s is missing from %s: install the PostgreSQL server package", name, dir)
		}
	}
	return dir, nil
}

// versionOf reads the major version from /usr/lib/postgresql/<v>/bin.
func versionOf(dir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return v
}

// serverUser returns the credentials to run the server as: the postgres
// user when we are root, else nil (ourselves).
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgcluster: running as root, and PostgreSQL refuses root: need an OS user \"postgres\" to run it as (useradd postgres): %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: uid of user postgres: %w", err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: gid of user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command returns a command of the server binaries, run as the server user.
func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.Dir = c.base
	cmd.Env = append(os.Environ(), "LC_ALL=C", "PGTZ=UTC")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	return cmd
}

func (c *Cluster) init(ctx context.Context, settings map[string]string) error {
	if err := os.Mkdir(c.sock, 0o700); err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	if c.cred != nil {
		for _, p := range []string{c.base, c.sock} {
			if err := os.Chown(p, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
				return fmt.Errorf("pgcluster: hand %s to user postgres: %w", p, err)
			}
		}
	}
	var out bytes.Buffer
	cmd := c.command(ctx, "initdb", "-D", c.data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		hint := ""
		if c.cred != nil {
			hint = " (it runs as user postgres, which must be able to reach " + c.base + ": set TMPDIR to a directory it can)"
		}
		return fmt.Errorf("pgcluster: initdb in %s%s: %w\n%s", c.data, hint, err, out.String())
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.port = port
	conf := map[string]string{
		"listen_addresses":        "'127.0.0.1'",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": "'" + c.sock + "'",
		"fsync":                   "off",
		"full_page_writes":        "off",
		"max_connections":         "300",
		"shared_buffers":          "64MB",
		"logging_collector":       "off",
	}
	for k, v := range settings {
		conf[k] = v
	}
	var b strings.Builder
	b.WriteString("\n# pgcluster\n")
	for _, k := range slices.Sorted(maps.Keys(conf)) {
		fmt.Fprintf(&b, "%s = %s\n", k, conf[k])
	}
	f, err := os.OpenFile(filepath.Join(c.data, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("pgcluster: %w", err)
	}
	_, err = f.WriteString(b.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgcluster: write postgresql.conf: %w", err)
	}
	return nil
}

// freePort returns a localhost TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgcluster: find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Dir is the cluster's temporary directory: data/, sock/ and postgres.log.
func (c *Cluster) Dir() string { return c.base }

// URL returns the URL of database on the cluster, as the superuser
// postgres, over TCP.
func (c *Cluster) URL(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, database)
}

// Start starts the server and waits until it accepts connections. Starting
// a running server is an error.
func (c *Cluster) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return errors.New("pgcluster: start: the cluster is closed")
	}
	if c.proc != nil {
		return errors.New("pgcluster: start: the server is already running")
	}
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("pgcluster: open server log: %w", err)
	}
	// Not CommandContext: the server outlives this call.
	cmd := c.command(context.Background(), "postgres", "-D", c.data)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The kernel kills the server if this process dies.
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("pgcluster: start postgres: %w", err)
	}
	logf.Close()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.proc, c.exited = cmd, exited
	if err := c.awaitReady(ctx, exited); err != nil {
		_ = cmd.Process.Kill()
		<-exited
		c.proc, c.exited = nil, nil
		return err
	}
	return nil
}

// awaitReady waits until the server accepts a connection.
func (c *Cluster) awaitReady(ctx context.Context, exited chan struct{}) error {
	deadline := time.Now().Add(c.timeout)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, c.URL("postgres"))
		cancel()
		if err == nil {
			conn.Close(context.Background())
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("pgcluster: postgres exited at start: see the log:\n%s", c.LogTail(2000))
		case <-ctx.Done():
			return fmt.Errorf("pgcluster: wait for postgres to start: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgcluster: postgres did not accept connections within %s (last error: %v); its log:\n%s", c.timeout, err, c.LogTail(2000))
		}
	}
}

// Stop shuts the server down with pg_ctl stop in the given mode and waits
// for it to exit. Stopping a stopped server is an error.
func (c *Cluster) Stop(ctx context.Context, mode StopMode) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(ctx, mode)
}

func (c *Cluster) stopLocked(ctx context.Context, mode StopMode) error {
	if c.proc == nil {
		return errors.New("pgcluster: stop: the server is not running")
	}
	var out bytes.Buffer
	cmd := c.command(ctx, "pg_ctl", "stop", "-D", c.data, "-m", string(mode), "-w", "-t", "60")
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if err != nil {
		// pg_ctl could not do it: make sure the server is gone anyway.
		_ = c.proc.Process.Kill()
	}
	select {
	case <-c.exited:
	case <-time.After(time.Minute):
		return fmt.Errorf("pgcluster: postgres (pid %d) did not exit after pg_ctl stop -m %s", c.proc.Process.Pid, mode)
	}
	c.proc, c.exited = nil, nil
	if err != nil {
		return fmt.Errorf("pgcluster: pg_ctl stop -m %s: %w\n%s", mode, err, out.String())
	}
	return nil
}

// Running reports whether the server process is up (it may not accept
// connections yet, or any more).
func (c *Cluster) Running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// TerminateBackends kills up to n connections to database, chosen at
// random (pg_terminate_backend), and returns how many it killed. n <= 0
// means all of them.
func (c *Cluster) TerminateBackends(ctx context.Context, database string, n int) (int, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return 0, fmt.Errorf("pgcluster: terminate backends: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	const q = `
SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
FROM (SELECT pid FROM pg_stat_activity
      WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
      ORDER BY random() LIMIT $2) s`
	limit := any(n)
	if n <= 0 {
		limit = nil // LIMIT NULL: no limit
	}
	var killed int
	if err := conn.QueryRow(ctx, q, database, limit).Scan(&killed); err != nil {
		return 0, fmt.Errorf("pgcluster: terminate backends of %s: %w", database, err)
	}
	return killed, nil
}

// CreateDatabase creates a database and returns its URL.
func (c *Cluster) CreateDatabase(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("pgcluster: create database %s: %w", name, err)
	}
	return c.URL(name), nil
}

// LogTail returns the last n bytes of the server's log.
func (c *Cluster) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// Close stops the server (immediate shutdown: the data is thrown away) and
// removes the cluster's directory. It may be called more than once.
func (c *Cluster) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var err error
	if c.proc != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		err = c.stopLocked(ctx, Immediate)
		cancel()
	}
	if rerr := os.RemoveAll(c.base); rerr != nil && err == nil {
		err = fmt.Errorf("pgcluster: remove %s: %w", c.base, rerr)
	}
	return err
}

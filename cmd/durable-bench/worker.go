package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"time"
)

// workerCommand, as the first argument, makes this program a worker
// process: an engine that runs until its standard input closes. It is not a
// flag, so that -help does not list it.
const workerCommand = "__worker"

// readyLine is what a worker prints once its engine has run a workflow.
const readyLine = "ready\n"

// workerDBEnv passes the connection string to workers: in the environment,
// not on a command line that ps shows, password and all.
const workerDBEnv = "DURABLE_BENCH_WORKER_DB"

// runWorker is the worker process: it runs an engine with the workloads
// registered on the database given, prints readyLine once a warm-up
// workflow has completed (so its workers poll and it listens for
// notifications), and stops when stdin reaches EOF or ctx ends.
func runWorker(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("durable-bench "+workerCommand, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbName := fs.String("dbname", "", "database to run in (the server comes from $"+workerDBEnv+")")
	conns := fs.Int("conns", 20, "pool size")
	cache := fs.Int("cache", 0, "workflow cache size (0: the engine's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn := os.Getenv(workerDBEnv)
	if conn == "" || *dbName == "" {
		return errors.New("worker: -dbname and $" + workerDBEnv + " are required")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		cancel()
	}()

	pool, err := openPool(ctx, conn, *dbName, *conns)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	defer pool.Close()
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	e, err := newEngine(pool, log, *cache)
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- e.Run(ctx) }()

	if err := warmUp(ctx, e); err != nil {
		cancel()
		return errors.Join(fmt.Errorf("worker: %w", err), <-done)
	}
	if _, err := io.WriteString(stdout, readyLine); err != nil {
		cancel()
		return errors.Join(err, <-done)
	}
	<-ctx.Done()
	if err := <-done; err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// workers are engine processes started by the driver: this program,
// re-executed with workerCommand.
type workers struct {
	procs []*workerProc
}

type workerProc struct {
	cmd    *exec.Cmd
	stdin  io.Closer
	ready  *readyWriter
	exited chan error // receives Wait's error
}

// startWorkers starts n worker processes with conns connections each and
// waits until every one is ready.
func (b *bench) startWorkers(ctx context.Context, n, conns int) (*workers, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this program to start workers: %w", err)
	}
	w := &workers{}
	for range n {
		cmd := exec.Command(exe, workerCommand, "-dbname", b.dbName, "-conns", strconv.Itoa(conns), "-cache", strconv.Itoa(b.cfg.cache))
		cmd.Env = append(os.Environ(), workerDBEnv+"="+b.conn)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, errors.Join(fmt.Errorf("start worker: %w", err), w.stop())
		}
		p := &workerProc{cmd: cmd, stdin: stdin, ready: newReadyWriter(), exited: make(chan error, 1)}
		cmd.Stdout, cmd.Stderr = p.ready, b.stderr
		if err := cmd.Start(); err != nil {
			return nil, errors.Join(fmt.Errorf("start worker: %w", err), w.stop())
		}
		go func() { p.exited <- cmd.Wait() }()
		w.procs = append(w.procs, p)
	}
	timeout := time.NewTimer(2 * time.Minute)
	defer timeout.Stop()
	for i, p := range w.procs {
		select {
		case <-p.ready.c:
		case err := <-p.exited:
			p.exited <- err // for stop
			return nil, errors.Join(fmt.Errorf("worker %d of %d exited before it was ready: %v", i+1, n, err), w.stop())
		case <-timeout.C:
			return nil, errors.Join(fmt.Errorf("worker %d of %d not ready after 2 minutes", i+1, n), w.stop())
		case <-ctx.Done():
			return nil, errors.Join(ctx.Err(), w.stop())
		}
	}
	return w, nil
}

// stop closes the workers' standard input, which makes them drain and
// exit, and waits for them; a worker still running after a minute is killed.
func (w *workers) stop() error {
	var errs []error
	for _, p := range w.procs {
		_ = p.stdin.Close()
	}
	for i, p := range w.procs {
		select {
		case err := <-p.exited:
			if err != nil {
				errs = append(errs, fmt.Errorf("worker %d: %w", i+1, err))
			}
		case <-time.After(time.Minute):
			_ = p.cmd.Process.Kill()
			<-p.exited
			errs = append(errs, fmt.Errorf("worker %d did not stop within a minute: killed", i+1))
		}
	}
	w.procs = nil
	return errors.Join(errs...)
}

// readyWriter takes a worker's standard output and closes c when the
// worker says it is ready.
type readyWriter struct {
	mu   sync.Mutex
	buf  []byte
	c    chan struct{}
	once sync.Once
}

func newReadyWriter() *readyWriter { return &readyWriter{c: make(chan struct{})} }

func (w *readyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if bytes.Contains(w.buf, []byte(readyLine)) {
		w.once.Do(func() { close(w.c) })
		w.buf = w.buf[:0]
	}
	return len(p), nil
}

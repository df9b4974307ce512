package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/osclock"
)

// workerEnv carries a worker's configuration (JSON) to the process that
// re-executes the same binary; its presence makes that process a worker.
const workerEnv = "DURABLE_CHAOS_WORKER"

// workerConfig is what a worker process needs to know.
type workerConfig struct {
	Slot         int           `json:"slot"`
	DatabaseURL  string        `json:"database_url"`
	LogPath      string        `json:"log_path"`
	Lease        time.Duration `json:"lease"`
	PollInterval time.Duration `json:"poll_interval"`
	Concurrency  int           `json:"concurrency"`
	// DeadlockTimeout is engine.Options.WorkflowDeadlockTimeout.
	DeadlockTimeout time.Duration `json:"deadlock_timeout"`
	// ClockSkew is how far off the clock of the worker's machine is: the
	// process's wall clock as the engine reads it (internal/osclock). The
	// engine takes its times from the database's clock, carried forward by
	// the process's monotonic clock, so the skew must change nothing.
	ClockSkew time.Duration `json:"clock_skew"`
	// Gen is the generation of the workflow code it runs (see
	// workload.Versioned).
	Gen int `json:"gen"`
	// PayloadKey is the AES key of the payload codec every engine of the
	// rig has (codec.AESGCM).
	PayloadKey []byte `json:"payload_key"`
}

// Messages the worker logs about itself.
const (
	msgWorkerReady   = "chaos: worker running"
	msgWorkerStopped = "chaos: worker stopped"
	msgNewFailed     = "chaos: engine.New failed; retrying until it works"
)

// IsWorker reports whether this process was started by the rig as a worker.
// A program that hosts the rig (a test binary's TestMain, the durable-chaos
// command) calls it first thing and, if true, exits with WorkerMain's code.
func IsWorker() bool { return os.Getenv(workerEnv) != "" }

// WorkerMain runs this process as a chaos worker: an engine with the
// workload registered, on the rig's database, until SIGTERM or until its
// standard input closes (the driver went away). It returns the exit code.
func WorkerMain() int {
	var cfg workerConfig
	if err := json.Unmarshal([]byte(os.Getenv(workerEnv)), &cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker: bad $%s: %v\n", workerEnv, err)
		return 2
	}
	if err := runWorker(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "chaos worker %d: %v\n", cfg.Slot, err)
		return 1
	}
	return 0
}

func runWorker(cfg workerConfig) error {
	// O_APPEND and one write per record: lines written before a SIGKILL
	// are in the file.
	f, err := os.OpenFile(cfg.LogPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("open log: %w", err)
	}
	defer f.Close()
	pid := os.Getpid()
	log := slog.New(slog.NewJSONHandler(f, &slog.HandlerOptions{Level: slog.LevelInfo})).With(slog.Int("pid", pid), slog.Int("slot", cfg.Slot))

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()

	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("parse database URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.Concurrency + 8)
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	// The database records which session wrote what (the rig's triggers
	// read application_name), and the rig kills connections by it.
	pcfg.ConnConfig.RuntimeParams["application_name"] = workerID(cfg.Slot, pid)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return fmt.Errorf("open pool: %w", err)
	}
	defer pool.Close()

	c, err := codec.AESGCM(cfg.PayloadKey)
	if err != nil {
		return err
	}
	w := &workload{pool: pool, pid: pid, log: log, lease: cfg.Lease, gen: cfg.Gen}
	opts := engine.Options{
		Queues:            map[string]engine.QueueOptions{engine.DefaultQueue: {WorkflowConcurrency: cfg.Concurrency, ActivityConcurrency: cfg.Concurrency}},
		Logger:            log,
		WorkerID:          workerID(cfg.Slot, pid),
		WorkflowTaskLease: cfg.Lease,
		PollInterval:      cfg.PollInterval,
		ShutdownTimeout:   2 * time.Second,
		SkipMigrate:       true,
		Codec:             c,

		WorkflowDeadlockTimeout: cfg.DeadlockTimeout,
	}
	osclock.Skew(cfg.ClockSkew)
	// The database may be down when a worker (re)starts: keep trying, as a
	// deployment would, logging the first failure only. Each try gets a new
	// registry: a New that fails has registered its metrics already.
	var (
		e        *engine.Engine
		reg      *prometheus.Registry
		failures int
	)
	for backoff := 50 * time.Millisecond; ; backoff = min(2*backoff, time.Second) {
		reg = prometheus.NewRegistry()
		opts.Registerer = reg
		if e, err = engine.New(pool, opts); err == nil {
			break
		}
		if failures == 0 {
			log.LogAttrs(ctx, slog.LevelWarn, msgNewFailed, slog.String("error", err.Error()))
		}
		failures++
		if !sleepCtx(ctx, backoff) {
			return nil
		}
	}
	if err := w.register(e); err != nil {
		return err
	}
	log.LogAttrs(ctx, slog.LevelInfo, msgWorkerReady, slog.String("worker", opts.WorkerID), slog.Int("new_failures", failures),
		slog.Duration("clock_skew", cfg.ClockSkew), slog.Int("gen", cfg.Gen))
	err = e.Run(ctx)
	log.LogAttrs(context.Background(), slog.LevelInfo, msgWorkerStopped, slog.Int("stale_writes", int(staleWrites(reg))))
	return err
}

// workerID names a worker's claims so that the driver can tell whose they
// are; it is also the application_name of its connections.
func workerID(slot, pid int) string { return fmt.Sprintf("chaos-s%d-p%d", slot, pid) }

// pidOfWorker returns the pid in a workerID, or 0 if id is not one.
func pidOfWorker(id string) int {
	_, p, ok := strings.Cut(id, "-p")
	if !ok || !strings.HasPrefix(id, "chaos-s") {
		return 0
	}
	pid, err := strconv.Atoi(p)
	if err != nil {
		return 0
	}
	return pid
}

// staleWrites sums durable_stale_writes_rejected_total.
func staleWrites(g prometheus.Gatherer) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return -1
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "durable_stale_writes_rejected_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

// worker is one slot of the driver's worker processes: a process that is
// killed, paused and restarted, its log in one file across restarts.
type worker struct {
	slot    int
	cmdPath string
	cmdArgs []string
	// env returns the environment of a new process: it carries the
	// configuration, which changes when the code is upgraded.
	env    func() []string
	stderr string // file for the process's own output (panics)

	mu       sync.Mutex
	cmd      *exec.Cmd
	pid      int
	stdin    io.WriteCloser
	exited   chan struct{}
	expected bool // the driver ended it: its exit is no surprise
	paused   bool
	// resumed is when the process was last resumed after a pause: the
	// kills that skip paused processes leave it alone for resumedGrace
	// after that too, so that it makes the writes its claims no longer
	// cover (and fencing refuses). Killed at once, as a loaded machine
	// made likely, it made none, and a short run saw no stale write.
	resumed time.Time
	// surprise is called when a process exits without the driver ending
	// it: the engine crashed.
	surprise func(slot, pid int, err error)
}

// start starts a new process in the slot.
func (w *worker) start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd != nil {
		return fmt.Errorf("worker %d: start: pid %d is running", w.slot, w.pid)
	}
	out, err := os.OpenFile(w.stderr, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("worker %d: %w", w.slot, err)
	}
	defer out.Close()
	cmd := exec.Command(w.cmdPath, w.cmdArgs...)
	cmd.Env = w.env()
	cmd.Stdout, cmd.Stderr = out, out
	// The process group lets SIGKILL and SIGSTOP reach the whole process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("worker %d: %w", w.slot, err)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("worker %d: start %s: %w", w.slot, w.cmdPath, err)
	}
	exited := make(chan struct{})
	w.cmd, w.pid, w.stdin, w.exited, w.expected, w.paused, w.resumed = cmd, cmd.Process.Pid, stdin, exited, false, false, time.Time{}
	go func() {
		err := cmd.Wait()
		w.mu.Lock()
		surprise := !w.expected
		pid := cmd.Process.Pid
		if w.cmd == cmd {
			w.cmd, w.pid, w.stdin = nil, 0, nil
		}
		w.mu.Unlock()
		close(exited)
		if surprise && w.surprise != nil {
			w.surprise(w.slot, pid, err)
		}
	}()
	return nil
}

// current returns the running process's pid, and whether it is paused.
func (w *worker) current() (pid int, paused bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pid, w.paused
}

// resumedGrace is how long after a resume a process is not killed by the
// faults that leave paused processes alone.
const resumedGrace = 3 * time.Second

// kill SIGKILLs the running process and waits for it to exit. It returns
// the pid it killed, or 0 if none ran, another caller is ending it, or it
// is paused (or was resumed within resumedGrace) and skipPaused says to
// leave it alone.
func (w *worker) kill(skipPaused bool) int {
	w.mu.Lock()
	if w.cmd == nil || w.expected || (skipPaused && (w.paused || time.Since(w.resumed) < resumedGrace)) {
		w.mu.Unlock()
		return 0
	}
	pid, exited := w.pid, w.exited
	w.expected = true
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = w.stdin.Close()
	w.mu.Unlock()
	<-exited
	return pid
}

// pause SIGSTOPs the process pid, if it still runs in the slot.
func (w *worker) pause(pid int) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.cmd == nil || w.pid != pid || w.paused {
		return false
	}
	if err := syscall.Kill(-pid, syscall.SIGSTOP); err != nil {
		return false
	}
	w.paused = true
	return true
}

// resume SIGCONTs a paused process.
func (w *worker) resume(pid int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pid == pid && w.paused {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		w.paused, w.resumed = false, time.Now()
	}
}

// stop ends the process gracefully (SIGTERM; SIGKILL after timeout).
func (w *worker) stop(timeout time.Duration) error {
	w.mu.Lock()
	if w.cmd == nil {
		w.mu.Unlock()
		return nil
	}
	pid, exited := w.pid, w.exited
	w.expected = true
	if w.paused {
		_ = syscall.Kill(-pid, syscall.SIGCONT)
		w.paused = false
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	w.mu.Unlock()
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	<-exited
	return fmt.Errorf("worker %d (pid %d) did not stop within %s of SIGTERM; killed", w.slot, pid, timeout)
}

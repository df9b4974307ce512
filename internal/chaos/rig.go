package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/pgcluster"
)

// Options configure one run of the rig. A fault whose interval is zero is
// not injected; ShortOptions turns them all on.
type Options struct {
	// Workflows is the least number of workflows to start. Default 40.
	Workflows int
	// Duration is the least time to go on starting workflows and injecting
	// faults; after it, and once every fault that is on has happened and,
	// with pauses on, fencing has refused a write (for at most twice as long
	// again), faults stop and the rest drains.
	// Default 20s.
	Duration time.Duration
	// InFlight is the most workflows open at once. Default 30.
	InFlight int
	// Workers is the number of worker processes. Default 3.
	Workers int
	// Concurrency is each worker's workflow and activity concurrency.
	// Default 16.
	Concurrency int
	// Lease is the workflow-task lease and the activities' start-to-close
	// (and heartbeat) timeout: how long a dead worker's claims hold.
	// Default 1s.
	Lease time.Duration
	// PollInterval is the workers' backstop poll. Default 1s.
	PollInterval time.Duration

	// KillEvery is the mean time between SIGKILLs of one random worker.
	KillEvery time.Duration
	// KillAllEvery is the mean time between SIGKILLs of all workers at once.
	KillAllEvery time.Duration
	// PauseEvery is the mean time between SIGSTOPs of a worker holding
	// claims, resumed with SIGCONT after its lease, plus PollInterval, plus
	// up to a second.
	PauseEvery time.Duration
	// PGStopEvery is the mean time between server stops (alternately fast
	// and immediate), each lasting up to PGStopMax (default 2s).
	PGStopEvery time.Duration
	PGStopMax   time.Duration
	// ConnKillEvery is the mean time between pg_terminate_backend of 1-4
	// random connections to the rig's database.
	ConnKillEvery time.Duration

	// SpinEvery is the mean time between runs of workflow code that never
	// yields (KindSpin), which the driver terminates. 0: none.
	SpinEvery time.Duration
	// UpgradeAt is when, after the start, every worker is upgraded to the
	// second generation of the workflow code (see workload.Versioned); it
	// must come before Duration ends. 0: they run it from the start.
	UpgradeAt time.Duration
	// ClockSkews are how far off the clocks of the worker slots are meant
	// to be, in slot order; slots past the end are right. As of 2026-12-03
	// they are asked for and not applied (see workerConfig.ClockSkew).
	ClockSkews []time.Duration
	// WrongKeySignals makes about one Flow in six get a signal from an
	// engine whose payload key is not the workers' first: the engine must
	// refuse it.
	WrongKeySignals bool
	// DeadlockTimeout is the workers' engine.Options.WorkflowDeadlockTimeout.
	// Default three quarters of Lease: a task whose code spins fails
	// before its lease ends.
	DeadlockTimeout time.Duration

	// DrainTimeout bounds the wait for the open workflows once the faults
	// stop. Default 2m.
	DrainTimeout time.Duration
	// Seed makes the workload's inputs and the faults' choices
	// reproducible (not their timing). Default: from the clock.
	Seed uint64
	// Dir keeps the logs: the workers', the driver's and the server's.
	// Default: a new temporary directory.
	Dir string
	// WorkerCommand runs a worker: a program that calls IsWorker and
	// WorkerMain first thing. Default: this executable, with no arguments.
	WorkerCommand []string
	// Logf receives progress lines. Default: none.
	Logf func(format string, args ...any)
}

// dbName is the rig's database on its private cluster; driverName is the
// application_name of the driver's connections.
const (
	dbName     = "chaos"
	driverName = "chaos-driver"
)

// payloadKeys returns the rig's payload key, from the seed, and another:
// the key of the engine whose key is wrong.
func payloadKeys(seed uint64) (key, wrong []byte) {
	rng := rand.New(rand.NewPCG(seed, 99))
	key, wrong = make([]byte, 32), make([]byte, 32)
	for i := range key {
		key[i], wrong[i] = byte(rng.Uint32()), byte(rng.Uint32())
	}
	return key, wrong
}

// ShortOptions are the short mode's: every fault on, sized to finish in
// about a minute on two loaded cores under the race detector.
func ShortOptions() Options {
	return Options{
		Workflows: 40, Duration: 20 * time.Second, InFlight: 24, Workers: 3,
		Concurrency: 16, Lease: time.Second, DrainTimeout: 2 * time.Minute,
		KillEvery: 700 * time.Millisecond, KillAllEvery: 8 * time.Second, PauseEvery: 3 * time.Second,
		PGStopEvery: 5 * time.Second, PGStopMax: 2 * time.Second, ConnKillEvery: 1500 * time.Millisecond,
		SpinEvery: 8 * time.Second, UpgradeAt: 10 * time.Second, WrongKeySignals: true,
		ClockSkews: []time.Duration{0, -5 * time.Second, time.Hour},
	}
}

func (o Options) withDefaults() (Options, error) {
	if o.Workflows == 0 {
		o.Workflows = 40
	}
	if o.Duration == 0 {
		o.Duration = 20 * time.Second
	}
	if o.InFlight == 0 {
		o.InFlight = 30
	}
	if o.Workers == 0 {
		o.Workers = 3
	}
	if o.Concurrency == 0 {
		o.Concurrency = 16
	}
	if o.Lease == 0 {
		o.Lease = time.Second
	}
	if o.PollInterval == 0 {
		o.PollInterval = time.Second
	}
	if o.PGStopMax == 0 {
		o.PGStopMax = 2 * time.Second
	}
	if o.DrainTimeout == 0 {
		o.DrainTimeout = 2 * time.Minute
	}
	if o.DeadlockTimeout == 0 {
		o.DeadlockTimeout = 3 * o.Lease / 4
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if len(o.WorkerCommand) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return o, fmt.Errorf("chaos: find this executable to run workers: %w", err)
		}
		o.WorkerCommand = []string{exe}
	}
	switch {
	case o.Workflows < 0, o.InFlight < 0, o.Workers < 0, o.Concurrency < 0, o.Duration < 0, o.Lease < 0:
		return o, errors.New("chaos: options must not be negative")
	case o.KillEvery < 0, o.KillAllEvery < 0, o.PauseEvery < 0, o.PGStopEvery < 0, o.ConnKillEvery < 0, o.PGStopMax < 0, o.SpinEvery < 0:
		return o, errors.New("chaos: fault intervals must not be negative (0 turns a fault off)")
	case o.UpgradeAt < 0 || o.UpgradeAt >= o.Duration && o.UpgradeAt > 0:
		return o, fmt.Errorf("chaos: the upgrade (at %s) must come within the duration (%s)", o.UpgradeAt, o.Duration)
	case o.DeadlockTimeout < 0:
		return o, errors.New("chaos: the deadlock timeout must not be negative")
	}
	return o, nil
}

// rig is one run: the cluster, the workers, the driver.
type rig struct {
	o       Options
	dir     string
	cluster *pgcluster.Cluster
	dbURL   string
	pool    *pgxpool.Pool
	e       *engine.Engine
	w       *workload
	workers []*worker
	faults  faultLog
	began   time.Time
	// codec is every engine's payload codec; wrongE is an engine on the
	// same database whose codec has another key.
	codec  codec.PayloadCodec
	wrongE *engine.Engine
	// gen is the generation of the workflow code new worker processes
	// run; upgraded is closed once every worker runs the second.
	gen      atomic.Int32
	upgraded chan struct{}

	started, finished    atomic.Int64
	open                 sync.Map // workflow ID of each run not finished yet
	clientErrs, waitErrs atomic.Int64
	waitingUpgrade       atomic.Int64
	// What the driver saw: signals from the wrong-key engine sent, refused
	// and accepted; never-yielding runs started, seen failing with a
	// deadlock error, and terminated.
	wrongKeySent, wrongKeyRefused, wrongKeyAccepted atomic.Int64
	spins, spinDeadlocks, spinsTerminated           atomic.Int64

	mu              sync.Mutex
	violations      []string
	waitErrExample  string
	wrongKeyExample string
}

// deadlockTimeout is the workers' deadlock timeout.
func (r *rig) deadlockTimeout() time.Duration { return r.o.DeadlockTimeout }

// workloadDone reports whether the parts of the workload that happen once
// or now and then have happened: the upgrade, a terminated spinning run.
func (r *rig) workloadDone() bool {
	return (r.o.UpgradeAt == 0 || r.isUpgraded()) && (r.o.SpinEvery == 0 || r.spinsTerminated.Load() > 0)
}

func (r *rig) violate(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.violations = append(r.violations, fmt.Sprintf(format, args...))
}

// Run runs the rig: a private PostgreSQL cluster, Workers worker
// processes, the workload and the faults; then it checks the database and
// the logs, and reports. An error means the rig itself could not run; what
// the engine got wrong is in the report's Violations.
func Run(ctx context.Context, o Options) (*Report, error) {
	o, err := o.withDefaults()
	if err != nil {
		return nil, err
	}
	began := time.Now()
	r := &rig{o: o, dir: o.Dir, began: began, upgraded: make(chan struct{})}
	if o.UpgradeAt > 0 {
		r.gen.Store(1)
	} else {
		r.gen.Store(2)
	}
	if r.dir == "" {
		if r.dir, err = os.MkdirTemp("", "durable-chaos-"); err != nil {
			return nil, fmt.Errorf("chaos: %w", err)
		}
	} else if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	if err := r.setUp(ctx); err != nil {
		r.tearDown()
		return nil, err
	}
	defer r.tearDown()

	in := &injector{
		o: o, workers: r.workers, cluster: r.cluster, pool: r.pool, log: &r.faults,
		rng: rand.New(rand.NewPCG(o.Seed, 1)),
		errf: func(format string, args ...any) {
			r.violate("rig: "+format, args...)
		},
	}
	in.stale = newStaleWatch(r.workerLogs())
	for _, w := range r.workers {
		if err := w.start(); err != nil {
			return nil, err
		}
	}

	faultCtx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		in.run(faultCtx)
	}()
	progressCtx, stopProgress := context.WithCancel(ctx)
	progressDone := make(chan struct{})
	go func() {
		defer close(progressDone)
		r.progress(progressCtx, began)
	}()
	defer func() { stopProgress(); <-progressDone }()

	driveCtx, stopDriving := context.WithCancel(ctx)
	defer stopDriving()
	var drivers sync.WaitGroup
	drivers.Go(func() { r.upgradeWorkers(driveCtx) })
	spinCtx, stopSpins := context.WithCancel(ctx)
	defer stopSpins()
	spinsDone := make(chan struct{})
	go func() {
		defer close(spinsDone)
		r.startSpins(spinCtx, driveCtx, &drivers)
	}()
	sem := make(chan struct{}, o.InFlight)
produce:
	for seq := 1; ; seq++ {
		// Go on until the duration is over, the workflows started and
		// every fault happened (with a refused write) and so did the
		// workload's rarer parts; the last for at most twice the duration.
		if elapsed := time.Since(began); elapsed >= o.Duration && seq > o.Workflows && (in.allInjected() && r.workloadDone() || elapsed >= 3*o.Duration) {
			break
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break produce
		}
		drivers.Go(func() {
			defer func() { <-sem }()
			r.drive(driveCtx, seq)
		})
	}
	stopSpins()
	<-spinsDone
	stopFaults()
	<-injected
	o.Logf("chaos: faults stopped after %s; draining %d open workflows", time.Since(began).Round(time.Second), r.started.Load()-r.finished.Load())

	drained := make(chan struct{})
	go func() { drivers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(o.DrainTimeout):
		r.violate("lost: %d workflows did not finish within %s after the faults stopped%s",
			r.started.Load()-r.finished.Load(), o.DrainTimeout, r.describeOpen(ctx))
		stopDriving()
		<-drained
	case <-ctx.Done():
		stopDriving()
		<-drained
		return nil, ctx.Err()
	}
	for _, w := range r.workers {
		if err := w.stop(15 * time.Second); err != nil {
			r.violate("%v", err)
		}
	}
	return r.report(ctx, began)
}

func (r *rig) setUp(ctx context.Context) error {
	var err error
	r.cluster, err = pgcluster.New(ctx, pgcluster.Options{})
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if r.dbURL, err = r.cluster.CreateDatabase(ctx, dbName); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	pcfg, err := pgxpool.ParseConfig(r.dbURL)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	pcfg.MaxConns = 16
	pcfg.ConnConfig.ConnectTimeout = 2 * time.Second
	pcfg.ConnConfig.RuntimeParams["application_name"] = driverName
	if r.pool, err = pgxpool.NewWithConfig(ctx, pcfg); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	logf, err := os.OpenFile(filepath.Join(r.dir, "driver.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	log := slog.New(slog.NewJSONHandler(logf, nil)).With(slog.Int("pid", os.Getpid()), slog.String("role", "driver"))
	r.w = &workload{pool: r.pool, pid: os.Getpid(), log: log, lease: r.o.Lease, gen: 2}
	key, wrongKey := payloadKeys(r.o.Seed)
	if r.codec, err = codec.AESGCM(key); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	wrongCodec, err := codec.AESGCM(wrongKey)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	// The driver only starts, signals and waits: it never calls Run. Nor
	// does the engine whose key is wrong.
	if r.e, err = engine.New(r.pool, engine.Options{Logger: log, PollInterval: r.o.PollInterval, Codec: r.codec}); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if r.wrongE, err = engine.New(r.pool, engine.Options{Logger: log.With(slog.String("engine", "wrong key")), PollInterval: r.o.PollInterval,
		Codec: wrongCodec, SkipMigrate: true}); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if err := errors.Join(r.w.register(r.e), r.w.register(r.wrongE)); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	if _, err := r.pool.Exec(ctx, schemaSQL); err != nil {
		return fmt.Errorf("chaos: create the rig's tables: %w", err)
	}
	for i := range r.o.Workers {
		cfg := workerConfig{
			Slot: i, DatabaseURL: r.dbURL, LogPath: r.workerLog(i), Lease: r.o.Lease,
			PollInterval: r.o.PollInterval, Concurrency: r.o.Concurrency,
			DeadlockTimeout: r.o.DeadlockTimeout, PayloadKey: key,
		}
		if i < len(r.o.ClockSkews) {
			cfg.ClockSkew = r.o.ClockSkews[i]
		}
		if _, err := json.Marshal(cfg); err != nil {
			return fmt.Errorf("chaos: %w", err)
		}
		r.workers = append(r.workers, &worker{
			slot: i, cmdPath: r.o.WorkerCommand[0], cmdArgs: r.o.WorkerCommand[1:],
			env: func() []string {
				cfg := cfg
				cfg.Gen = int(r.gen.Load())
				b, _ := json.Marshal(cfg) // it marshaled above
				return append(os.Environ(), workerEnv+"="+string(b))
			},
			stderr: r.workerStderr(i),
			surprise: func(slot, pid int, err error) {
				r.violate("worker %d (pid %d) exited without being killed: %v; see %s", slot, pid, err, r.workerStderr(slot))
				if err := r.workers[slot].start(); err != nil {
					r.violate("rig: restart worker %d: %v", slot, err)
				}
			},
		})
	}
	return nil
}

func (r *rig) workerLog(slot int) string {
	return filepath.Join(r.dir, fmt.Sprintf("worker-%d.log", slot))
}

// workerLogs lists the workers' log files, one per slot.
func (r *rig) workerLogs() []string {
	var logs []string
	for i := range r.workers {
		logs = append(logs, r.workerLog(i))
	}
	return logs
}

func (r *rig) workerStderr(slot int) string {
	return filepath.Join(r.dir, fmt.Sprintf("worker-%d.stderr", slot))
}

func (r *rig) tearDown() {
	for _, w := range r.workers {
		w.kill(false)
	}
	if r.pool != nil {
		r.pool.Close()
	}
	if r.cluster != nil {
		// Keep the server's log with the others.
		_ = os.WriteFile(filepath.Join(r.dir, "postgres.log"), []byte(r.cluster.LogTail(1<<30)), 0o644)
		if err := r.cluster.Close(); err != nil {
			r.o.Logf("chaos: %v", err)
		}
	}
}

func (r *rig) progress(ctx context.Context, began time.Time) {
	t := time.NewTicker(5 * time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		counts := map[FaultKind]int{}
		for _, f := range r.faults.all() {
			counts[f.Kind]++
		}
		r.o.Logf("chaos: %3ds started %d finished %d faults %v", int(time.Since(began).Seconds()), r.started.Load(), r.finished.Load(), counts)
	}
}

// report checks the database and the logs, and puts the report together.
func (r *rig) report(ctx context.Context, began time.Time) (*Report, error) {
	wl, err := readWorkerLogs(r.workerLogs())
	if err != nil {
		return nil, fmt.Errorf("chaos: %w", err)
	}
	faults := r.faults.all()
	sortFaults(faults)
	f, err := check(ctx, r.pool, checkInput{faults: faults, logs: wl, lease: r.o.Lease, codec: r.codec})
	if err != nil {
		return nil, fmt.Errorf("chaos: check: %w", err)
	}
	rep := &Report{
		Findings: f, Seed: r.o.Seed, Dir: r.dir, Workers: r.o.Workers, ClockSkews: r.o.ClockSkews,
		StaleWrites: wl.staleTotal(), StaleByWrite: wl.stale, StaleMetricOfStopped: wl.staleMetric, StaleLogOfStopped: wl.staleOfStopped,
		ClientRetries: int(r.clientErrs.Load()), ResultWaitErrors: int(r.waitErrs.Load()),
		LogLines: wl.lines, EngineErrors: len(wl.errors), DeadlockTaskFailures: wl.deadlocks,
		StarvedDeadlocks: wl.starved, StarvedDeadlockExample: wl.starvedExample,
		WrongKeySignals: int(r.wrongKeySent.Load()), WrongKeyRefused: int(r.wrongKeyRefused.Load()),
		WrongKeyAccepted: int(r.wrongKeyAccepted.Load()), WrongKeyRefusalExample: r.wrongKeyExample,
		SpinRuns: int(r.spins.Load()), SpinDeadlocksSeen: int(r.spinDeadlocks.Load()), SpinsTerminated: int(r.spinsTerminated.Load()),
	}
	for k, p := range wl.procs {
		pid := k.pid
		rep.RetryLogLines += p.retries
		// A process should log about one line per outage it lived through
		// (a killed connection is a short outage), not one per retry.
		outages := 0
		for _, f := range faults {
			switch f.Kind {
			case FaultStopFast, FaultStopCrash, FaultConnKill:
				if !f.Until.Before(p.first.Add(-time.Second)) && !f.At.After(p.last.Add(time.Second)) {
					outages++
				}
			}
		}
		if limit := 3*outages + 3; p.retries > limit {
			r.violate("log flood: worker pid %d logged %d lines about the database being away in %d outages (at most %d expected: one per outage)", pid, p.retries, outages, limit)
		}
	}
	rep.EngineErrorsFromDB = wl.dbErrors
	if wl.dbErrors > 0 {
		rep.EngineErrorFromDBExample = wl.dbErrorExample
	}
	for _, ft := range faults {
		switch ft.Kind {
		case FaultKill:
			rep.Kills++
		case FaultKillAll:
			rep.KillAllProcesses++
		case FaultPause:
			rep.Pauses++
			if ft.Targeted {
				rep.TargetedPauses++
			}
		case FaultStopFast:
			rep.PGStopsFast++
		case FaultStopCrash:
			rep.PGStopsImmediate++
		case FaultConnKill:
			rep.ConnKills++
			rep.ConnectionsKilled += ft.N
		case FaultUpgrade:
			rep.Upgrades++
		}
	}
	rep.PGRestarts = rep.PGStopsFast + rep.PGStopsImmediate
	for _, st := range wl.staleAt {
		for _, f := range faults {
			// A write a paused worker made after it was resumed.
			if f.Kind == FaultPause && f.PID == st.pid && !st.at.Before(f.At) && st.at.Sub(f.Until) < 10*time.Second {
				rep.ZombieWritesRejected++
				break
			}
		}
	}
	rep.KillAlls = countDistinctAt(faults, FaultKillAll)
	for i := range r.workers {
		b, err := os.ReadFile(r.workerStderr(i))
		if err != nil {
			continue
		}
		for _, bad := range []string{"WARNING: DATA RACE", "panic:", "fatal error:"} {
			if n := strings.Count(string(b), bad); n > 0 {
				r.violate("worker %d: %q %d times in %s", i, bad, n, r.workerStderr(i))
			}
		}
	}
	for _, e := range wl.errors {
		r.violate("engine logged an error: %.500s", e)
	}
	r.mu.Lock()
	rep.Violations = append(r.violations, rep.Violations...)
	rep.ResultWaitErrorExample = r.waitErrExample
	r.mu.Unlock()
	rep.Elapsed = time.Since(began)
	if err := os.WriteFile(filepath.Join(r.dir, "report.txt"), []byte(rep.Table()+rep.JSON()+"\n"), 0o644); err != nil {
		return rep, fmt.Errorf("chaos: %w", err)
	}
	return rep, nil
}

// countDistinctAt counts the distinct times of faults of a kind (a kill of
// all workers is one fault per process, all at one time).
func countDistinctAt(fs []Fault, kind FaultKind) int {
	seen := map[time.Time]bool{}
	for _, f := range fs {
		if f.Kind == kind {
			seen[f.At] = true
		}
	}
	return len(seen)
}

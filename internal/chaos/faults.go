package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/pgcluster"
)

// FaultKind names a kind of injected fault.
type FaultKind string

// The faults the rig injects.
const (
	FaultKill      FaultKind = "kill"     // one worker SIGKILLed
	FaultKillAll   FaultKind = "kill_all" // every worker SIGKILLed at once (one fault per process)
	FaultPause     FaultKind = "pause"    // a worker SIGSTOPped past its lease, then SIGCONTed
	FaultStopFast  FaultKind = "pg_stop_fast"
	FaultStopCrash FaultKind = "pg_stop_immediate"
	FaultConnKill  FaultKind = "conn_kill" // pg_terminate_backend on engine connections
	// FaultUpgrade is a worker killed and started again on the second
	// generation of the workflow code (one fault per process).
	FaultUpgrade FaultKind = "upgrade"
)

// Fault is one injected fault, by the driver's clock (the same machine's
// clock as the database's).
type Fault struct {
	Kind FaultKind `json:"kind"`
	// PID is the worker process it hit (kills, pauses, upgrades).
	PID int `json:"pid,omitempty"`
	// PIDs are the worker processes whose connections a conn_kill ended
	// (0 for the driver's).
	PIDs []int `json:"pids,omitempty"`
	// At is when it began; Until when it ended (a pause's SIGCONT, the
	// server accepting connections again); equal for instant faults.
	At    time.Time `json:"at"`
	Until time.Time `json:"until"`
	// N is how many connections a conn_kill terminated.
	N int `json:"n,omitempty"`
	// Targeted is true for a pause chosen because the worker held claims.
	Targeted bool `json:"targeted,omitempty"`
}

// faultLog is the driver's record of what it did.
type faultLog struct {
	mu     sync.Mutex
	faults []Fault
}

func (l *faultLog) add(f Fault) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults = append(l.faults, f)
}

func (l *faultLog) all() []Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Fault(nil), l.faults...)
}

// injector runs the fault loops of one rig until their context ends.
type injector struct {
	o       Options
	workers []*worker
	cluster *pgcluster.Cluster
	pool    *pgxpool.Pool // the driver's, to find workers that hold claims
	log     *faultLog
	rng     *rand.Rand
	rngMu   sync.Mutex
	// pg serialises server stops with everything that needs the server up.
	pg sync.Mutex
	// stops counts the server stops so far, to alternate their modes.
	stops int
	// errf reports a failure of the rig itself (not of the engine).
	errf func(format string, args ...any)
	// stale watches the workers' logs for a write fencing refused.
	stale *staleWatch
}

// jitter returns a random duration in [d/2, 3d/2).
func (in *injector) jitter(d time.Duration) time.Duration {
	in.rngMu.Lock()
	defer in.rngMu.Unlock()
	return d/2 + time.Duration(in.rng.Int64N(int64(d)))
}

func (in *injector) intN(n int) int {
	in.rngMu.Lock()
	defer in.rngMu.Unlock()
	return in.rng.IntN(n)
}

// run starts the loops of the faults that are on and returns when ctx ends
// and every loop has put things back (workers running, server up).
func (in *injector) run(ctx context.Context) {
	var wg sync.WaitGroup
	loop := func(every time.Duration, first time.Duration, fn func(context.Context)) {
		if every <= 0 {
			return
		}
		wg.Go(func() {
			wait := first
			for sleepCtx(ctx, wait) {
				fn(ctx)
				wait = in.jitter(every)
			}
		})
	}
	o := in.o
	loop(o.KillEvery, in.jitter(o.KillEvery), in.killOne)
	loop(o.KillAllEvery, in.jitter(o.KillAllEvery/2), in.killAll)
	loop(o.PauseEvery, in.jitter(o.PauseEvery/2), in.pauseOne)
	loop(o.PGStopEvery, in.jitter(o.PGStopEvery/2), in.stopServer)
	loop(o.ConnKillEvery, in.jitter(o.ConnKillEvery/2), in.killConns)
	wg.Wait()
}

// restartDelay is how long a killed worker stays down.
func (in *injector) restartDelay() time.Duration {
	return time.Duration(in.intN(200)) * time.Millisecond
}

func (in *injector) killOne(ctx context.Context) {
	w := in.workers[in.intN(len(in.workers))]
	at := time.Now()
	if pid := w.kill(true); pid != 0 {
		in.log.add(Fault{Kind: FaultKill, PID: pid, At: at, Until: time.Now()})
		sleepCtx(ctx, in.restartDelay())
		if err := w.start(); err != nil {
			in.errf("restart worker: %v", err)
		}
	}
}

func (in *injector) killAll(ctx context.Context) {
	var killed []*worker
	at := time.Now()
	for _, w := range in.workers {
		if pid := w.kill(true); pid != 0 {
			in.log.add(Fault{Kind: FaultKillAll, PID: pid, At: at, Until: time.Now()})
			killed = append(killed, w)
		}
	}
	sleepCtx(ctx, in.restartDelay())
	for _, w := range killed {
		if err := w.start(); err != nil {
			in.errf("restart worker: %v", err)
		}
	}
}

// findClaimHolderSQL picks one of the given workers that holds a live
// claim, preferring the heartbeating activity (long enough to be caught in
// flight).
const findClaimHolderSQL = `
SELECT locked_by FROM (
    SELECT locked_by, CASE WHEN activity = '` + beatName + `' THEN 0 ELSE 1 END AS pref
    FROM durable_activity_tasks WHERE locked_by = ANY($1) AND locked_until > now()
    UNION ALL
    SELECT locked_by, 2 FROM durable_workflow_tasks WHERE locked_by = ANY($1) AND locked_until > now()
) c ORDER BY pref, random() LIMIT 1`

// pauseOne SIGSTOPs a worker that holds claims (any worker if none does
// within two seconds) for longer than its lease, then SIGCONTs it: a
// zombie whose writes must be refused.
func (in *injector) pauseOne(ctx context.Context) {
	var (
		target   *worker
		pid      int
		targeted bool
	)
	for deadline := time.Now().Add(2 * time.Second); target == nil && time.Now().Before(deadline); {
		live := map[string]*worker{}
		var ids []string
		for _, w := range in.workers {
			if p, paused := w.current(); !paused && p != 0 {
				live[workerID(w.slot, p)] = w
				ids = append(ids, workerID(w.slot, p))
			}
		}
		var holder string
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		err := in.pool.QueryRow(qctx, findClaimHolderSQL, ids).Scan(&holder)
		cancel()
		if w := live[holder]; err == nil && w != nil {
			target, targeted = w, true
			pid, _ = w.current()
			break
		}
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return
		}
	}
	if target == nil {
		target = in.workers[in.intN(len(in.workers))]
		pid, _ = target.current()
	}
	if pid == 0 || !target.pause(pid) {
		return
	}
	at := time.Now()
	// Past the lease, and long enough for another worker to claim the work
	// again (its poller wakes when the lease ends, or at its backstop poll).
	sleepCtx(context.WithoutCancel(ctx), in.o.Lease+in.o.PollInterval+time.Duration(in.intN(1000))*time.Millisecond)
	target.resume(pid)
	in.log.add(Fault{Kind: FaultPause, PID: pid, At: at, Until: time.Now(), Targeted: targeted})
}

// stopServer stops the server, alternating fast and immediate shutdowns,
// and starts it again after up to PGStopMax.
func (in *injector) stopServer(ctx context.Context) {
	in.pg.Lock()
	defer in.pg.Unlock()
	kind, mode := FaultStopFast, pgcluster.Fast
	if in.stops%2 == 1 {
		kind, mode = FaultStopCrash, pgcluster.Immediate
	}
	at := time.Now()
	bg := context.WithoutCancel(ctx)
	if err := in.cluster.Stop(bg, mode); err != nil {
		in.errf("stop the server: %v", err)
		return
	}
	sleepCtx(bg, time.Duration(in.intN(int(in.o.PGStopMax/time.Millisecond)+1))*time.Millisecond)
	if err := in.cluster.Start(bg); err != nil {
		in.errf("start the server again: %v", err)
		return
	}
	in.stops++
	in.log.add(Fault{Kind: kind, At: at, Until: time.Now()})
}

// allInjected reports whether every fault that is on has happened at
// least once (a pause: of a worker that held claims, and a write fencing
// refused; server stops: both modes). It is called from one goroutine.
func (in *injector) allInjected() bool {
	need := map[FaultKind]bool{}
	if in.o.KillEvery > 0 {
		need[FaultKill] = true
	}
	if in.o.KillAllEvery > 0 {
		need[FaultKillAll] = true
	}
	if in.o.PauseEvery > 0 {
		need[FaultPause] = true
	}
	if in.o.PGStopEvery > 0 {
		need[FaultStopFast], need[FaultStopCrash] = true, true
	}
	if in.o.ConnKillEvery > 0 {
		need[FaultConnKill] = true
	}
	for _, f := range in.log.all() {
		if f.Kind != FaultPause || f.Targeted {
			delete(need, f.Kind)
		}
	}
	if len(need) > 0 {
		return false
	}
	return in.o.PauseEvery == 0 || in.stale.found()
}

// terminateSQL ends up to $2 random connections to database $1 and
// returns the application_name of each: whose they were.
const terminateSQL = `
SELECT s.application_name FROM (
    SELECT pid, application_name FROM pg_stat_activity
    WHERE datname = $1 AND backend_type = 'client backend' AND pid <> pg_backend_pid()
    ORDER BY random() LIMIT $2
) s WHERE pg_terminate_backend(s.pid)`

// killConns terminates a few random connections to the rig's database:
// workers', the driver's, the listeners'. The fault names the processes
// whose connections it ended, so that only their attempts are explained
// by it.
func (in *injector) killConns(ctx context.Context) {
	in.pg.Lock()
	defer in.pg.Unlock()
	at := time.Now()
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(qctx, in.cluster.URL("postgres"))
	if err != nil {
		in.errf("terminate backends: %v", err)
		return
	}
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(qctx, terminateSQL, dbName, 1+in.intN(4))
	if err != nil {
		in.errf("terminate backends: %v", err)
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		in.errf("terminate backends: %v", err)
		return
	}
	if len(names) > 0 {
		f := Fault{Kind: FaultConnKill, At: at, Until: time.Now(), N: len(names)}
		for _, name := range names {
			f.PIDs = append(f.PIDs, pidOfWorker(name))
		}
		in.log.add(f)
	}
}

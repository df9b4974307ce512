package postgres

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/durable-go/durable/internal/store"
)

// grouper commits the writes of many workflow steps in one transaction.
//
// On Postgres a commit costs a WAL flush and per-transaction CPU; under load
// those, not the statements, bound throughput. Writes submitted while a
// group is being committed wait and go together in the next one, so an idle
// engine commits each write at once (no added latency) and a busy one
// commits many per transaction. Every write is one statement that checks
// its own fence (claim token or attempt); a write whose fence fails changes
// nothing, inside a group as alone. A group whose transaction fails is
// retried write by write, so one bad write cannot fail the others.
type grouper struct {
	s    *Store
	reqs chan *groupReq
	max  int

	mu      sync.RWMutex // guards running against submit/stop
	running bool
	wg      sync.WaitGroup
}

type groupReq struct {
	ctx  context.Context
	key  string // run ID: groups take their rows' locks in key order
	sql  string
	args namedArgs
	scan func(pgx.Row) error
	many *manyStmt // if set, the statement that does this write with others of its kind
	// claim, if set, claims one activity task in the write's transaction
	// (store.CommitWorkflowTaskParams.ClaimNext); next is what it took,
	// set before done.
	claim *store.ClaimParams
	next  *store.ActivityTask
	done  chan error
}

// StartGroupCommit makes CommitWorkflowTask, ResolveActivity and eager
// CreateRun go through group commits on `flushers` connections, at most max
// writes per transaction, until the returned stop is called. stop waits for
// every submitted write.
func (s *Store) StartGroupCommit(flushers, max int) (stop func()) {
	g := &grouper{s: s, reqs: make(chan *groupReq, 1024), max: max, running: true}
	for range flushers {
		g.wg.Add(1)
		go g.flush()
	}
	s.group.Store(g)
	return func() {
		g.mu.Lock()
		g.running = false
		close(g.reqs)
		g.mu.Unlock()
		g.wg.Wait()
		s.group.CompareAndSwap(g, nil)
	}
}

// writeRow runs a one-row write, grouped with others when group commit is on
// and the store is not bound to a caller's transaction.
func (s *Store) writeRow(ctx context.Context, key, sql string, args namedArgs, scan func(pgx.Row) error) error {
	return s.queryRowMany(ctx, key, sql, nil, args, scan)
}

// queryRowMany is writeRow for a write that a group may do together with
// others of its kind, in many's one statement.
func (s *Store) queryRowMany(ctx context.Context, key, sql string, many *manyStmt, args namedArgs, scan func(pgx.Row) error) error {
	_, err := s.queryRowClaiming(ctx, key, sql, many, args, nil, scan)
	return err
}

// queryRowClaiming is queryRowMany that, when the write is grouped, also
// claims an activity task in its transaction as claim asks, and returns it.
func (s *Store) queryRowClaiming(ctx context.Context, key, sql string, many *manyStmt, args namedArgs,
	claim *store.ClaimParams, scan func(pgx.Row) error) (*store.ActivityTask, error) {
	if g := s.group.Load(); g != nil && s.db == dbtx(s.pool) {
		r := &groupReq{ctx: ctx, key: key, sql: sql, args: args, scan: scan, many: many, claim: claim, done: make(chan error, 1)}
		if g.submit(r) {
			err := <-r.done
			return r.next, err
		}
	}
	return nil, s.queryRow(ctx, sql, scan, args)
}

func (g *grouper) submit(r *groupReq) bool {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if !g.running {
		return false
	}
	g.reqs <- r
	return true
}

// flush commits batches until the request channel is closed and drained.
// A batch holds at most one write per run: each write locks its task, then
// its run, and a second write of the same run in the transaction would lock
// its task after the run, against that order, and could deadlock with a
// batch of the other flusher. A run's further writes wait for the next
// batch.
func (g *grouper) flush() {
	defer g.wg.Done()
	var next []*groupReq // held back from the last batch
	for {
		var batch []*groupReq
		runs := map[string]bool{}
		add := func(r *groupReq) {
			if r.key != "" && runs[r.key] {
				next = append(next, r)
				return
			}
			if r.key != "" {
				runs[r.key] = true
			}
			batch = append(batch, r)
		}
		held := next
		next = nil
		for _, r := range held {
			add(r)
		}
		if len(batch) == 0 {
			r, ok := <-g.reqs
			if !ok {
				return
			}
			add(r)
		}
	more:
		for len(batch) < g.max {
			select {
			case r, ok := <-g.reqs:
				if !ok {
					break more
				}
				add(r)
			default:
				break more
			}
		}
		g.commit(batch)
	}
}

func (g *grouper) commit(batch []*groupReq) {
	if len(batch) == 1 && batch[0].claim == nil {
		r := batch[0]
		r.done <- g.s.queryRow(r.ctx, r.sql, r.scan, r.args)
		return
	}
	slices.SortStableFunc(batch, func(a, b *groupReq) int { return strings.Compare(a.key, b.key) })
	// The group's writes outlive any one caller's context.
	ctx := context.WithoutCancel(batch[0].ctx)
	// A batch sent outside a transaction is one implicit transaction (one
	// Sync ends it): all its writes commit together or none does, without
	// the round trips of BEGIN and COMMIT.
	b := &pgx.Batch{}
	b.Queue(indexPlans)
	if keys := batchRuns(batch); len(keys) > 1 {
		b.Queue(lockRunsSQL, keys)
	}
	var kinds []*manyStmt
	same := map[*manyStmt][]*groupReq{}
	for _, r := range batch {
		if r.many == nil {
			b.Queue(r.sql, r.args).QueryRow(r.scan)
			continue
		}
		if same[r.many] == nil {
			kinds = append(kinds, r.many)
		}
		same[r.many] = append(same[r.many], r)
	}
	for _, m := range kinds {
		reqs := same[m]
		var args namedArgs
		if len(reqs) > 1 {
			args, _ = m.args(reqs) // arguments that do not merge (a bug) go one by one
		}
		if args == nil {
			for _, r := range reqs {
				b.Queue(r.sql, r.args).QueryRow(r.scan)
			}
			delete(same, m)
			continue
		}
		b.Queue(m.sql, args).Query(m.scanEach(reqs))
	}
	// The claims go last: they never wait for a lock (SKIP LOCKED), so a
	// transaction that holds their locks waits for nothing more.
	queueClaims(b, batch)
	err := g.s.pool.SendBatch(ctx, b).Close()
	if err == nil {
		for _, r := range batch {
			r.done <- nil
		}
		return
	}
	if errors.Is(err, context.Canceled) {
		for _, r := range batch {
			r.next = nil
			r.done <- err
		}
		return
	}
	for _, r := range batch { // find the bad write: each on its own; nothing was claimed
		r.next = nil
		r.done <- g.s.queryRow(r.ctx, r.sql, r.scan, r.args)
	}
}

// lockRunsSQL takes a transaction-scoped advisory lock per run of a group,
// in the order given (run ID order), before any of the group's writes.
// The writes take their row locks statement by statement, kind by kind
// (see commit), so two groups that both have writes of the same two runs
// could lock their rows in opposite orders and deadlock; Postgres breaks
// that after deadlock_timeout, a second in which neither group commits. The
// advisory locks make such groups queue, in one order, before they touch a
// row. A single write needs none: it touches one run.
const lockRunsSQL = `SELECT count(pg_advisory_xact_lock(hashtextextended(k, 0))) FROM unnest($1::text[]) AS k`

// batchRuns returns the runs of a batch sorted by key (commit sorted the
// batch), each once.
func batchRuns(batch []*groupReq) []string {
	var keys []string
	for _, r := range batch {
		if r.key != "" && (len(keys) == 0 || keys[len(keys)-1] != r.key) {
			keys = append(keys, r.key)
		}
	}
	return keys
}

// queueClaims adds to b the claims of the batch's writes: one statement
// for all that claim alike (queue, worker, types), each write getting at
// most one task.
func queueClaims(b *pgx.Batch, batch []*groupReq) {
	var (
		keys []string
		same map[string][]*groupReq // made on the first claim: most batches have none
	)
	for _, r := range batch {
		if r.claim == nil {
			continue
		}
		if same == nil {
			same = map[string][]*groupReq{}
		}
		k := r.claim.Queue + "\x00" + r.claim.WorkerID + "\x00" + strings.Join(r.claim.Types, "\x00")
		if r.claim.Types == nil {
			k += "\x01" // any type
		}
		if same[k] == nil {
			keys = append(keys, k)
		}
		same[k] = append(same[k], r)
	}
	if len(keys) == 0 {
		return
	}
	for _, k := range keys {
		reqs := same[k]
		in := *reqs[0].claim
		in.Limit, in.Prefer = len(reqs), nil
		for _, r := range reqs {
			in.Prefer = append(in.Prefer, r.claim.Prefer...)
			in.PreferEarly = max(in.PreferEarly, r.claim.PreferEarly)
			in.OldestFirst = in.OldestFirst || r.claim.OldestFirst
			if r.claim.Now.After(in.Now) {
				in.Now = r.claim.Now
			}
		}
		b.Queue(claimActivityTasksSQL, claimActivityArgs(in)).Query(func(rows pgx.Rows) error {
			tasks, err := pgx.CollectRows(rows, scanActivityTask)
			for i := range min(len(tasks), len(reqs)) {
				reqs[i].next = &tasks[i]
			}
			return err
		})
	}
}

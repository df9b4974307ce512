// Package notify is the engine's notification Hub: one listening
// connection per engine, whose notes it fans out to the pollers and Result
// waiters that want them, and a send loop that batches the notes for other
// engines.
package notify

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"sync"
	"time"

	"github.com/durable-go/durable/codec"
	"github.com/durable-go/durable/internal/outage"
	"github.com/durable-go/durable/internal/store"
)

// WorkflowTasks is the note of a ready workflow task of queue.
func WorkflowTasks(queue string) store.Note {
	return store.Note{Kind: store.NoteWorkflowTasks, Queue: queue}
}

// ActivityTasks is the note of a ready activity task of queue.
func ActivityTasks(queue string) store.Note {
	return store.Note{Kind: store.NoteActivityTasks, Queue: queue}
}

// Timers is the note of a new timer: the scanner looks again.
var Timers = store.Note{Kind: store.NoteTimers}

// ReadyNotes are the notes of the work r made ready.
func ReadyNotes(r store.Ready) []store.Note {
	var notes []store.Note
	for _, q := range r.WorkflowQueues {
		notes = append(notes, WorkflowTasks(q))
	}
	for _, q := range r.ActivityQueues {
		notes = append(notes, ActivityTasks(q))
	}
	return notes
}

// publishNow sends r's notifications at once, for a caller outside Run.
func (h *Hub) PublishNow(ctx context.Context, r store.Ready) {
	notes := ReadyNotes(r)
	if r.ClosedRun != "" {
		notes = append(notes, store.Note{Kind: store.NoteClosed, RunID: r.ClosedRun})
	}
	if len(notes) == 0 {
		return
	}
	if err := h.store.Notify(ctx, notes); err != nil {
		h.log.LogAttrs(ctx, slog.LevelWarn, "send notifications; workers pick the work up at their next poll",
			slog.String("error", err.Error()))
	}
}

// Hub holds one LISTEN connection per engine and fans notifications out to
// the pollers and Result waiters that want them. It runs only while someone
// uses it: the first user starts it, the last one stops it.
type Hub struct {
	// id names this engine to the runs it starts (store.Run.Waiter).
	ID    string
	store store.Store
	log   *slog.Logger
	// db logs the outages the listener, the sender and the engine's other
	// background loops run into, once each.
	DB *outage.Log

	life   sync.Mutex // guards refs, cancel, done, idle
	refs   int
	cancel context.CancelFunc
	done   chan struct{}
	// idle, while set, stops the Hub when it fires: the last Result waiter
	// left it running for linger (see releaseLater).
	idle   *time.Timer
	linger time.Duration

	mu      sync.Mutex // guards the subscriber maps, pending, and what follows
	wakes   map[store.Note][]*Waker
	waiters map[string]map[chan struct{}]struct{}
	closes  map[string]map[chan *store.CloseRun]struct{}
	pending map[store.Note]bool // notifications for other processes, not yet sent
	flush   chan struct{}
	// sending is set while a send loop runs, and cleared by it only with
	// nothing pending: Publish sends itself when it is not set.
	sending bool
	// recent are the runs seen to close in the last closeMemory, with how
	// they closed if it was here (nil: elsewhere), oldest first in
	// recentLog; listening is since when the LISTEN has held without a gap
	// (zero: it does not). See subscribeSince.
	recent    map[string]*store.CloseRun
	recentLog []recentClose
	listening time.Time

	gap  time.Duration      // the least time between two busy sends: notifyGap
	sent func([]store.Note) // for tests: called with each send's notes, before it

	// backstop says which of the runs waited on here are not running, for
	// closes whose notification was lost. It runs every backstopEvery, and
	// at once after a gap in the LISTEN (recheck); see backstopLoop. Every
	// engine sets it; the Hub's own tests, which wait on no run, leave it
	// nil.
	Backstop      func(ctx context.Context, runIDs []string) ([]string, error)
	BackstopEvery time.Duration
	recheck       chan struct{}
}

// backstopChunk is the most runs one backstop statement asks about.
const backstopChunk = 10_000

// closeMemory is how long the Hub remembers that a run closed.
const closeMemory = 2 * time.Second

type recentClose struct {
	runID string
	at    time.Time
}

// remember records that runID closed, how if c is set, and forgets closes
// older than closeMemory. h.mu is held.
func (h *Hub) remember(runID string, c *store.CloseRun) {
	now := time.Now()
	if old, ok := h.recent[runID]; !ok {
		h.recent[runID] = c
		h.recentLog = append(h.recentLog, recentClose{runID: runID, at: now})
	} else if old == nil && c != nil {
		h.recent[runID] = c
	}
	n := 0
	for n < len(h.recentLog) && now.Sub(h.recentLog[n].at) > closeMemory {
		delete(h.recent, h.recentLog[n].runID)
		n++
	}
	h.recentLog = h.recentLog[n:]
}

// SubscribeSince is SubscribeRun for a run that was running at since (Start
// began to record it then; zero if it was started in a caller's
// transaction). It reports whether the caller may skip reading the run
// before it waits: whether every close since has reached the Hub (the
// LISTEN has held since before since, within closeMemory) and the run's, if
// any, came with its outcome, which the subscription then holds.
func (h *Hub) SubscribeSince(runID string, since time.Time) (*Sub, bool) {
	s := h.SubscribeRun(context.Background(), runID)
	if since.IsZero() {
		return s, false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.listening.IsZero() || h.listening.After(since) || time.Since(since) >= closeMemory {
		return s, false
	}
	c, closed := h.recent[runID]
	switch {
	case !closed:
		return s, true
	case c != nil:
		select {
		case s.Closed <- c:
		default: // delivered already
		}
		return s, true
	default: // closed elsewhere: read how
		return s, false
	}
}

// newHubID returns a random engine ID for store.Run.Waiter: 64 bits in 16
// hex digits, half the bytes of a UUID in every run row. Two engines that
// drew the same ID would each take the other's closes of their runs for
// their own and not announce them; their waiters would then wait for the
// backstop poll.
func newHubID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// Waker is a local poller: it is woken by a key, and says whether it has a
// free slot to take the work itself.
type Waker struct {
	C       chan struct{}
	hasFree func() bool
}

func NewHub(s store.Store, log *slog.Logger) *Hub {
	return &Hub{
		ID: newHubID(), store: s, log: log, DB: outage.New(log),
		wakes: map[store.Note][]*Waker{}, waiters: map[string]map[chan struct{}]struct{}{},
		closes:  map[string]map[chan *store.CloseRun]struct{}{},
		pending: map[store.Note]bool{}, flush: make(chan struct{}, 1),
		recent: map[string]*store.CloseRun{}, gap: notifyGap, recheck: make(chan struct{}, 1), linger: resultLinger,
	}
}

// Acquire starts the listener if it is not running and waits, at most a
// second, until it listens, so that a caller who then reads the database
// cannot miss a notification sent after the read.
func (h *Hub) Acquire() {
	h.life.Lock()
	defer h.life.Unlock()
	h.refs++
	if h.idle != nil { // still running after the last Result: keep it
		h.idle.Stop()
		h.idle = nil
		return
	}
	if h.refs > 1 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	ready := make(chan struct{})
	flushed, checked := make(chan struct{}), make(chan struct{})
	h.mu.Lock()
	h.sending = true
	h.mu.Unlock()
	go h.sendLoop(ctx, flushed)
	go h.backstopLoop(ctx, checked)
	go func() {
		h.listen(ctx, ready)
		<-flushed
		<-checked
		close(h.done)
	}()
	select {
	case <-ready:
	case <-time.After(time.Second):
	}
}

// Release undoes an Acquire; the last one stops the Hub and waits until it
// has.
func (h *Hub) Release() { h.releaseAfter(false) }

// resultLinger is how long a Hub keeps running after the last Result
// waiting on it returns. A client that starts a run and waits for it, then
// the next, would otherwise start a LISTEN for every Result and stop it
// before Result returns (two round trips), and would notify the start in
// its statement, whose commit then waits on Postgres's notification lock
// (docs/performance.md, history, 2026-12-01 at d365b20). It is short, so that a pool the client
// closes next (pgxpool.Pool.Close waits for the listener's connection) is
// held up no longer than that.
const resultLinger = 100 * time.Millisecond

// releaseLater is release for a Result: the last one leaves the Hub running
// for h.linger, in case another comes.
func (h *Hub) releaseLater() { h.releaseAfter(true) }

func (h *Hub) releaseAfter(linger bool) {
	h.life.Lock()
	defer h.life.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	if !linger || h.linger <= 0 {
		h.stop()
		return
	}
	var t *time.Timer
	t = time.AfterFunc(h.linger, func() {
		h.life.Lock()
		defer h.life.Unlock()
		if h.idle == t { // not acquired again since
			h.stop()
		}
	})
	h.idle = t
}

// stop stops the running Hub and waits until it has. h.life is held.
func (h *Hub) stop() {
	if h.idle != nil {
		h.idle.Stop()
		h.idle = nil
	}
	h.cancel()
	<-h.done
}

// Active reports whether the Hub runs, and so will send what is published.
func (h *Hub) Active() bool {
	h.life.Lock()
	defer h.life.Unlock()
	return h.refs > 0 || h.idle != nil
}

// Wake returns a channel that receives a value (coalesced) whenever work
// of note key is announced, here or by another engine: workflow or
// activity tasks of a queue, or timers. hasFree says whether the
// subscriber could take such work now.
func (h *Hub) Wake(key store.Note, hasFree func() bool) *Waker {
	w := &Waker{C: make(chan struct{}, 1), hasFree: hasFree}
	h.mu.Lock()
	h.wakes[key] = append(h.wakes[key], w)
	h.mu.Unlock()
	return w
}

func (h *Hub) Unwake(key store.Note, w *Waker) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.wakes[key]
	for i := range cs {
		if cs[i] == w {
			h.wakes[key] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(h.wakes[key]) == 0 {
		delete(h.wakes, key)
	}
}

type Sub struct {
	h     *Hub
	runID string
	// C receives a value when the run closes, or when notes may have been
	// lost: read the run.
	C chan struct{}
	// Closed receives how the run closed, when it closed in this process.
	Closed chan *store.CloseRun
}

// SubscribeRun returns a subscription whose channel receives a value when
// the run closes (or when notifications may have been lost).
func (h *Hub) SubscribeRun(_ context.Context, runID string) *Sub {
	s := &Sub{h: h, runID: runID, C: make(chan struct{}, 1), Closed: make(chan *store.CloseRun, 1)}
	h.mu.Lock()
	if h.waiters[runID] == nil {
		h.waiters[runID] = map[chan struct{}]struct{}{}
	}
	h.waiters[runID][s.C] = struct{}{}
	if h.closes[runID] == nil {
		h.closes[runID] = map[chan *store.CloseRun]struct{}{}
	}
	h.closes[runID][s.Closed] = struct{}{}
	h.mu.Unlock()
	h.Acquire()
	return s
}

func (s *Sub) Close() {
	s.h.mu.Lock()
	delete(s.h.waiters[s.runID], s.C)
	if len(s.h.waiters[s.runID]) == 0 {
		delete(s.h.waiters, s.runID)
	}
	delete(s.h.closes[s.runID], s.Closed)
	if len(s.h.closes[s.runID]) == 0 {
		delete(s.h.closes, s.runID)
	}
	s.h.mu.Unlock()
	s.h.releaseLater()
}

// DeliverClose hands how a run closed to its waiters in this process, so
// they need not read it back.
func (h *Hub) DeliverClose(runID string, c *store.CloseRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliverCloseLocked(runID, c)
}

func (h *Hub) deliverCloseLocked(runID string, c *store.CloseRun) {
	h.remember(runID, c)
	for ch := range h.closes[runID] {
		select {
		case ch <- c:
		default:
		}
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (h *Hub) dispatch(n store.Note) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n.Kind == store.NoteClosed {
		if c := n.Close; c != nil && !codec.IsWrapped(c.Result) {
			h.deliverCloseLocked(n.RunID, c) // before the wake: Result takes it then
		} else {
			h.remember(n.RunID, nil) // read how it closed from the run
		}
		for c := range h.waiters[n.RunID] {
			signal(c)
		}
		return
	}
	h.wakeLocked(n)
}

// wakeLocked wakes this engine's pollers of n's key. h.mu is held.
func (h *Hub) wakeLocked(n store.Note) {
	for _, w := range h.wakes[n] {
		signal(w.C)
	}
}

// takePending returns the pending notes and clears them. h.mu is held.
func (h *Hub) takePending() []store.Note {
	notes := make([]store.Note, 0, len(h.pending))
	for n := range h.pending {
		notes = append(notes, n)
	}
	clear(h.pending)
	return notes
}

// send sends notes to other processes in one transaction. Lost
// notifications cost other processes latency (their next poll), never
// work: they are not sent again.
func (h *Hub) send(ctx context.Context, notes []store.Note) {
	if h.sent != nil {
		h.sent(notes)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := h.store.Notify(sctx, notes); err != nil {
		h.DB.Fail(ctx, "send notifications", err, 0)
	} else {
		h.DB.OK(ctx, "send notifications")
	}
}

// WakeLocal wakes this engine's pollers of the notes' keys, and tells no
// other engine: the work is this engine's to take first.
func (h *Hub) WakeLocal(notes ...store.Note) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, n := range notes {
		h.wakeLocked(n)
	}
}

// Publish announces notes: to this process's subscribers at once, and to
// other processes by a notification that the send loop batches. Work that
// a local worker with a free slot will take is not announced to other
// processes. If no send loop runs (the hub has stopped: a client whose
// last Result's linger ran out), Publish sends the notes itself, at once.
func (h *Hub) Publish(notes ...store.Note) {
	h.mu.Lock()
	for _, n := range notes {
		taken := false
		if n.Kind == store.NoteClosed {
			h.remember(n.RunID, nil) // announce delivered the outcome here
			for c := range h.waiters[n.RunID] {
				signal(c)
			}
		} else {
			for _, w := range h.wakes[n] {
				signal(w.C)
				taken = taken || w.hasFree()
			}
		}
		if !taken {
			h.pending[n] = true
		}
	}
	signal(h.flush)
	var direct []store.Note
	if !h.sending && len(h.pending) > 0 {
		direct = h.takePending()
	}
	h.mu.Unlock()
	if len(direct) > 0 {
		h.send(context.Background(), direct)
	}
}

// sendLoop sends pending notifications, all that piled up since the
// previous send in one transaction. That transaction commits
// asynchronously: a lost notification costs latency (the backstop poll),
// never correctness. A send that new notifications arrived during is
// followed by the next one notifyGap later, not at once: an idle engine
// notifies at once, a busy one about every notifyGap. It makes a last send
// when ctx ends.
func (h *Hub) sendLoop(ctx context.Context, done chan struct{}) {
	defer close(done)
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		stop := false
		select {
		case <-gap.C:
		case <-ctx.Done():
			stop = true
		}
		if !stop {
			select {
			case <-h.flush:
			case <-ctx.Done():
				stop = true
			}
		}
		h.mu.Lock()
		notes := h.takePending()
		h.mu.Unlock()
		if len(notes) > 0 {
			h.send(ctx, notes)
		}
		h.mu.Lock()
		busy := len(h.pending) > 0
		if stop && !busy {
			h.sending = false // Publish sends what comes after
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		if busy {
			gap.Reset(h.gap)
		} else {
			gap.Reset(0)
		}
	}
}

// notifyGap is the least time between two sends of notifications. Each
// send is a transaction, and wakes every listening engine's connection;
// under load one every notifyGap carries what a send per close or
// scheduled activity did, at most notifyGap later (docs/performance.md,
// history, 2026-12-01 at 8676bcc).
const notifyGap = 5 * time.Millisecond

// wakeAll signals every poller, and asks the backstop about every waited
// run: after a reconnect, notifications may have been lost. Result waiters
// learn through the backstop, which asks about all their runs in one
// statement, rather than each reading its run.
func (h *Hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ws := range h.wakes {
		for _, w := range ws {
			signal(w.C)
		}
	}
	signal(h.recheck)
}

// backstopLoop is Result's backstop for closes whose notification was lost
// (the closing engine died between its commit and its NOTIFY, or this
// engine's LISTEN had a gap). Every backstopEvery, and at once after a gap,
// it asks which of the runs waited on here are not running, in one
// statement for all of them (per backstopChunk), and wakes their waiters,
// who read how the run closed. Waiting thus costs one statement per
// interval however many wait (each waiter once read its own run every
// PollInterval). It closes done when ctx ends.
func (h *Hub) backstopLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	if h.Backstop == nil {
		return
	}
	t := time.NewTimer(h.BackstopEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-h.recheck:
		}
		h.checkWaited(ctx)
		t.Reset(h.BackstopEvery)
	}
}

// checkWaited wakes the waiters of waited runs that are not running.
func (h *Hub) checkWaited(ctx context.Context) {
	h.mu.Lock()
	ids := make([]string, 0, len(h.waiters))
	for id := range h.waiters {
		ids = append(ids, id)
	}
	h.mu.Unlock()
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), backstopChunk)]
		ids = ids[len(chunk):]
		gone, err := h.Backstop(ctx, chunk)
		if err != nil {
			if ctx.Err() == nil {
				h.DB.Fail(ctx, "check the runs Result waits for", err, h.BackstopEvery)
			}
			return
		}
		h.DB.OK(ctx, "check the runs Result waits for")
		h.mu.Lock()
		for _, id := range gone {
			for c := range h.waiters[id] {
				signal(c)
			}
		}
		h.mu.Unlock()
	}
}

func (h *Hub) listen(ctx context.Context, ready chan struct{}) {
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := h.store.Listen(ctx, func() {
			h.mu.Lock()
			h.listening = time.Now()
			h.mu.Unlock()
			// Before ready: the pollers that start once acquire returns
			// begin with a claim of their own, and woken too they would
			// claim twice; those that began before (acquire waited a
			// second in vain) may have missed notifications, and are woken.
			h.wakeAll()
			if first {
				close(ready)
				first = false
			} else {
				h.DB.OK(ctx, "listen for notifications")
				h.log.LogAttrs(ctx, slog.LevelDebug, "notification listener reconnected")
			}
			backoff = 50 * time.Millisecond
		}, h.dispatch)
		h.mu.Lock()
		h.listening = time.Time{} // a gap: closes elsewhere may go unseen
		h.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		h.DB.Fail(ctx, "listen for notifications", err, backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

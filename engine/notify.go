package engine

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/durable-go/durable/internal/store/postgres"
)

// hub holds one LISTEN connection per engine and fans notifications out to
// the pollers and Result waiters that want them. It runs only while someone
// uses it: the first user starts it, the last one stops it.
type hub struct {
	pool *pgxpool.Pool
	log  *slog.Logger

	life   sync.Mutex // guards refs, cancel, done
	refs   int
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex // guards the subscriber maps
	wakes   map[string][]chan struct{}
	waiters map[string]map[chan struct{}]struct{}
}

func newHub(pool *pgxpool.Pool, log *slog.Logger) *hub {
	return &hub{pool: pool, log: log, wakes: map[string][]chan struct{}{}, waiters: map[string]map[chan struct{}]struct{}{}}
}

// acquire starts the listener if it is not running and waits, at most a
// second, until it listens, so that a caller who then reads the database
// cannot miss a notification sent after the read.
func (h *hub) acquire() {
	h.life.Lock()
	defer h.life.Unlock()
	h.refs++
	if h.refs > 1 {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel, h.done = cancel, make(chan struct{})
	ready := make(chan struct{})
	go h.listen(ctx, ready, h.done)
	select {
	case <-ready:
	case <-time.After(time.Second):
	}
}

func (h *hub) release() {
	h.life.Lock()
	defer h.life.Unlock()
	h.refs--
	if h.refs > 0 {
		return
	}
	h.cancel()
	<-h.done
}

// wake returns a channel that receives a value (coalesced) whenever a
// notification with the key arrives: "w:<queue>", "a:<queue>" or "t:".
func (h *hub) wake(key string) chan struct{} {
	c := make(chan struct{}, 1)
	h.mu.Lock()
	h.wakes[key] = append(h.wakes[key], c)
	h.mu.Unlock()
	return c
}

func (h *hub) unwake(key string, c chan struct{}) {
	h.mu.Lock()
	defer h.mu.Unlock()
	cs := h.wakes[key]
	for i := range cs {
		if cs[i] == c {
			h.wakes[key] = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(h.wakes[key]) == 0 {
		delete(h.wakes, key)
	}
}

type runSub struct {
	h     *hub
	runID string
	c     chan struct{}
}

// subscribeRun returns a subscription whose channel receives a value when
// the run closes (or when notifications may have been lost).
func (h *hub) subscribeRun(_ context.Context, runID string) *runSub {
	s := &runSub{h: h, runID: runID, c: make(chan struct{}, 1)}
	h.mu.Lock()
	if h.waiters[runID] == nil {
		h.waiters[runID] = map[chan struct{}]struct{}{}
	}
	h.waiters[runID][s.c] = struct{}{}
	h.mu.Unlock()
	h.acquire()
	return s
}

func (s *runSub) close() {
	s.h.mu.Lock()
	delete(s.h.waiters[s.runID], s.c)
	if len(s.h.waiters[s.runID]) == 0 {
		delete(s.h.waiters, s.runID)
	}
	s.h.mu.Unlock()
	s.h.release()
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func (h *hub) dispatch(payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if runID, ok := strings.CutPrefix(payload, "c:"); ok {
		for c := range h.waiters[runID] {
			signal(c)
		}
		return
	}
	for _, c := range h.wakes[payload] {
		signal(c)
	}
}

// wakeAll signals everyone: after a reconnect, notifications may have been lost.
func (h *hub) wakeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, cs := range h.wakes {
		for _, c := range cs {
			signal(c)
		}
	}
	for _, ws := range h.waiters {
		for c := range ws {
			signal(c)
		}
	}
}

func (h *hub) listen(ctx context.Context, ready, done chan struct{}) {
	defer close(done)
	backoff := 50 * time.Millisecond
	first := true
	for ctx.Err() == nil {
		err := h.listenOnce(ctx, func() {
			if first {
				close(ready)
				first = false
			} else {
				h.log.LogAttrs(ctx, slog.LevelInfo, "notification listener reconnected")
			}
			backoff = 50 * time.Millisecond
			h.wakeAll()
		})
		if ctx.Err() != nil {
			return
		}
		h.log.LogAttrs(ctx, slog.LevelWarn, "notification listener lost its connection; retrying",
			slog.String("error", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

func (h *hub) listenOnce(ctx context.Context, onListen func()) error {
	conn, err := h.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// A listening connection must not go back to the pool.
	pc := conn.Hijack()
	defer pc.Close(context.Background())
	if _, err := pc.Exec(ctx, "LISTEN "+postgres.NotifyChannel); err != nil {
		return err
	}
	onListen()
	for {
		n, err := pc.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		h.dispatch(n.Payload)
	}
}

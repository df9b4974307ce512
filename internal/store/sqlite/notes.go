package sqlite

import (
	"bytes"
	"context"
	"sync"

	"github.com/durable-go/durable/internal/store"
)

// SQLite has no LISTEN/NOTIFY, so notes go from store to store in process:
// every Store open on a file shares the file's noteHub (by its absolute
// path), and a note sent on it reaches every Listen of those stores. A note
// is queued for each listener and delivered on the listener's own Listen
// goroutine, so a sender never waits for a receiver. A note may be lost, as
// store.Store allows: a listener that falls maxQueued notes behind loses
// the newest (its engine polls as a backstop).

// maxQueued is the most notes a listener may have waiting.
const maxQueued = 10_000

// noteHub is the notes of one database file.
type noteHub struct {
	mu        sync.Mutex
	refs      int // the open stores on the file
	listeners map[*listener]struct{}
}

// listener is one Listen's queue of notes.
type listener struct {
	mu    sync.Mutex
	queue []store.Note
	wake  chan struct{} // has an element when queue may have notes
}

// hubs are the note hubs of the files open in this process, by path.
var hubs = struct {
	sync.Mutex
	byPath map[string]*noteHub
}{byPath: map[string]*noteHub{}}

// joinHub returns the note hub of the file at path, for a store opened on
// it.
func joinHub(path string) *noteHub {
	hubs.Lock()
	defer hubs.Unlock()
	h := hubs.byPath[path]
	if h == nil {
		h = &noteHub{listeners: map[*listener]struct{}{}}
		hubs.byPath[path] = h
	}
	h.refs++
	return h
}

// leaveHub lets go of the note hub of the file at path, for a store that
// closes; the last store to go takes it away.
func leaveHub(path string, h *noteHub) {
	hubs.Lock()
	defer hubs.Unlock()
	if h.refs--; h.refs == 0 && hubs.byPath[path] == h {
		delete(hubs.byPath, path)
	}
}

// send queues notes for every listener of the file.
func (h *noteHub) send(notes []store.Note) {
	if len(notes) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for l := range h.listeners {
		l.push(notes)
	}
}

// add registers a new listener.
func (h *noteHub) add() *listener {
	l := &listener{wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.listeners[l] = struct{}{}
	h.mu.Unlock()
	return l
}

// remove unregisters l.
func (h *noteHub) remove(l *listener) {
	h.mu.Lock()
	delete(h.listeners, l)
	h.mu.Unlock()
}

// push queues copies of notes for l (each receiver gets its own, as each
// would from a notification channel) and wakes it.
func (l *listener) push(notes []store.Note) {
	l.mu.Lock()
	for _, n := range notes {
		if len(l.queue) >= maxQueued {
			break
		}
		l.queue = append(l.queue, copyNote(n))
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default: // awake already
	}
}

// take returns the queued notes and empties the queue.
func (l *listener) take() []store.Note {
	l.mu.Lock()
	defer l.mu.Unlock()
	notes := l.queue
	l.queue = nil
	return notes
}

// copyNote returns n with a copy of everything it points to.
func copyNote(n store.Note) store.Note {
	if n.Close == nil {
		return n
	}
	c := *n.Close
	c.Result = bytes.Clone(c.Result)
	if c.Failure != nil {
		f := *c.Failure
		f.Details = bytes.Clone(f.Details)
		c.Failure = &f
	}
	n.Close = &c
	return n
}

// Notify implements store.Store: the notes reach every Listen of every
// store open on the file in this process, this one's included.
func (s *Store) Notify(ctx context.Context, notes []store.Note) error {
	select {
	case <-s.done:
		return errClosed
	default:
	}
	s.notes.send(notes)
	return nil
}

// announce notifies that tasks of kind became ready on queues, each queue
// once.
func (s *Store) announce(kind store.NoteKind, queues []string) {
	queues = distinct(queues)
	notes := make([]store.Note, len(queues))
	for i, q := range queues {
		notes[i] = store.Note{Kind: kind, Queue: q}
	}
	s.send(notes)
}

// Listen implements store.Store. It listens at once, calls onListen and
// delivers the notes sent from then on, in order, until ctx ends (it then
// returns ctx's error) or the store is closed.
func (s *Store) Listen(ctx context.Context, onListen func(), deliver func(store.Note)) error {
	select {
	case <-s.done:
		return errClosed
	default:
	}
	l := s.notes.add()
	defer s.notes.remove(l)
	onListen()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return errClosed
		case <-l.wake:
			for _, n := range l.take() {
				deliver(n)
			}
		}
	}
}

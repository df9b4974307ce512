package engine

import (
	"github.com/durable-go/durable/internal/backlog"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/internal/workers"
)

// activityHandOff is the activities a commit claims for this engine: those
// on queues it serves with a free slot, which then run without a claim
// transaction, and, in a fused step, the first on the finished activity's
// queue, which that activity's slot runs next. The others on queues it
// serves go to its backlog once the commit has taken effect. An activity
// already running ahead of the commit (runahead.go) is claimed for the
// slot it runs in.
type activityHandOff struct {
	reserved map[int64]*workers.Pool[store.ActivityTask]
	inline   int64 // seq of the activity for the calling slot, or 0
	ahead    *runAhead
	runID    string
	queued   []store.NewActivityTask // on served queues, without a slot
	backlog  *backlog.Backlog
}

// handOffActivities marks the activities of run runID to claim (ClaimAs)
// and reserves their slots. The pools are held from here on: Run may drop
// its pool list meanwhile. inlineQueue, if set, is the queue of the calling
// slot; ahead, if set, is running one of the activities already.
func (e *Engine) handOffActivities(runID string, acts []store.NewActivityTask, inlineQueue string, ahead *runAhead) activityHandOff {
	h := activityHandOff{reserved: map[int64]*workers.Pool[store.ActivityTask]{}, runID: runID, backlog: e.backlog, ahead: ahead}
	for i := range acts {
		a := &acts[i]
		p := e.activityPool(a.Queue)
		switch {
		case ahead != nil && a.Seq == ahead.task.Seq:
			a.ClaimAs = e.opts.WorkerID
		case p == nil, !e.hasActivity(a.Activity): // for the engines that have it
		case inlineQueue != "" && h.inline == 0 && a.Queue == inlineQueue:
			a.ClaimAs, h.inline = e.opts.WorkerID, a.Seq
		case p.TryAcquire():
			a.ClaimAs = e.opts.WorkerID
			h.reserved[a.Seq] = p
		default:
			a.RunAfter = a.RunAfter.Add(backlog.Hold) // for others; this engine claims it by name
			h.queued = append(h.queued, *a)
		}
	}
	return h
}

// start runs the tasks the commit claimed in their reserved slots, gives
// back the slots it claimed nothing for, puts the queued activities of a
// commit that took effect in the backlog, tells the activity running ahead
// of the commit which task is its own (none if the commit failed), and
// returns the calling slot's task.
func (h activityHandOff) start(claimed []store.ActivityTask, committed bool) (inline *store.ActivityTask) {
	if committed {
		h.backlog.Push(h.runID, h.queued)
	}
	var ahead *store.ActivityTask
	defer func() {
		if h.ahead != nil {
			h.ahead.settle(ahead, false)
		}
	}()
	for _, a := range claimed {
		if h.ahead != nil && a.Seq == h.ahead.task.Seq {
			ahead = &a
			continue
		}
		if a.Seq == h.inline {
			inline = &a
			continue
		}
		if p := h.reserved[a.Seq]; p != nil {
			p.Start(a)
			delete(h.reserved, a.Seq)
		}
	}
	for _, p := range h.reserved {
		p.Release()
	}
	return inline
}

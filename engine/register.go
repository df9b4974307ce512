package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"reflect"
	"runtime"
	"strings"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/internal/store"
	"github.com/durable-go/durable/workflow"
)

// WorkflowOptions configure a workflow at registration.
type WorkflowOptions struct {
	// Name is the name the workflow is registered and recorded under; history
	// stores names, not function pointers. Default: the function's name.
	Name string
	// Queue is where runs go when StartOptions names none. Default "default".
	// Run polls it unless Options.Queues lists queues without it (see
	// Options.Queues).
	Queue string
}

type workflowDef struct {
	name  string
	queue string
	// run decodes the input, calls the workflow function and encodes its result.
	run func(workflow.Context, json.RawMessage) (json.RawMessage, error)
}

type activityDef struct {
	name string
	opts activity.Options
	run  func(context.Context, json.RawMessage) (json.RawMessage, error)
}

// Registrar is what workflows and activities are registered on: an
// *Engine, which runs them, or a *Replayer, which replays their histories.
// A program that registers its code in one function taking a Registrar
// calls it for both, so the replayer knows the code under the names the
// engines recorded.
type Registrar interface {
	registry() *Engine
}

func (e *Engine) registry() *Engine { return e }

// RegisterWorkflow makes fn runnable by r under its name: by an engine's
// workers, or by a replayer. Register every workflow before Run.
func RegisterWorkflow[In, Out any](r Registrar, fn func(workflow.Context, In) (Out, error), o WorkflowOptions) error {
	if fn == nil {
		return fmt.Errorf("register workflow: nil function")
	}
	e := r.registry()
	name, err := registeredName(fn, o.Name)
	if err != nil {
		return fmt.Errorf("register workflow: %w", err)
	}
	if o.Queue == "" {
		o.Queue = DefaultQueue
	}
	def := &workflowDef{
		name:  name,
		queue: o.Queue,
		run: func(ctx workflow.Context, input json.RawMessage) (json.RawMessage, error) {
			var in In
			if err := decodePayload(input, &in); err != nil {
				return nil, fmt.Errorf("decode input of workflow %s: %w", name, err)
			}
			out, err := fn(ctx, in)
			if err != nil {
				return nil, err
			}
			return encodePayload(out, e.opts.MaxPayloadBytes, "result of workflow "+name)
		},
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.workflows[name]; dup {
		return fmt.Errorf("register workflow: %q is already registered", name)
	}
	if err := e.checkServedLocked("workflow", name, o.Queue); err != nil {
		return fmt.Errorf("register workflow %s: %w", name, err)
	}
	e.workflows[name] = def
	e.workflowTypes = append(e.workflowTypes, name)
	e.names[funcPC(fn)] = name
	return nil
}

// RegisterActivity makes fn runnable by r's workers, with o as its default
// options (workflow code may override them per call). On a Replayer, which
// runs no activity, it records the name and options that workflow code's
// calls of fn resolve to.
func RegisterActivity[In, Out any](r Registrar, fn func(context.Context, In) (Out, error), o activity.Options) error {
	if fn == nil {
		return fmt.Errorf("register activity: nil function")
	}
	e := r.registry()
	if err := o.Validate(); err != nil {
		return fmt.Errorf("register activity: %w", err)
	}
	name, err := registeredName(fn, o.Name)
	if err != nil {
		return fmt.Errorf("register activity: %w", err)
	}
	o.Name = name
	def := &activityDef{
		name: name,
		opts: o,
		run: func(ctx context.Context, input json.RawMessage) (json.RawMessage, error) {
			var in In
			if err := decodePayload(input, &in); err != nil {
				return nil, activity.Permanent(fmt.Errorf("decode input of activity %s: %w", name, err))
			}
			out, err := fn(ctx, in)
			if err != nil {
				return nil, err
			}
			return encodePayload(out, e.opts.MaxPayloadBytes, "result of activity "+name)
		},
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, dup := e.activities[name]; dup {
		return fmt.Errorf("register activity: %q is already registered", name)
	}
	if err := e.checkServedLocked("activity", name, cmp.Or(o.Queue, DefaultQueue)); err != nil {
		return fmt.Errorf("register activity %s: %w", name, err)
	}
	e.activities[name] = def
	e.activityTypes = append(e.activityTypes, name)
	e.names[funcPC(fn)] = name
	return nil
}

// checkServedLocked refuses a registration, while Run runs, on a queue Run
// does not poll but would have, had it been registered before (its pollers
// are started); with an explicit Options.Queues it warns, as Run does. e.mu
// is held.
func (e *Engine) checkServedLocked(kind, name, queue string) error {
	if e.served == nil {
		return nil
	}
	if _, ok := e.served[queue]; ok {
		return nil
	}
	if !e.opts.queuesFromRegistrations {
		e.warnNotServed(context.Background(), kind, name, queue)
		return nil
	}
	return fmt.Errorf("queue %q is not polled by the running engine: register before Run (or list the queue in Options.Queues)", queue)
}

func (e *Engine) warnNotServed(ctx context.Context, kind, name, queue string) {
	e.log.LogAttrs(ctx, slog.LevelWarn, "registered on a queue this engine does not poll (Options.Queues); its tasks wait for a worker that polls it",
		slog.String(kind, name), slog.String("queue", queue))
}

// serve returns the queues Run polls: Options.Queues and, unless those were
// given, every queue a registration names. It records them for
// checkServedLocked until unserve, and logs at Warn each registration on a
// queue an explicit Options.Queues leaves out.
func (e *Engine) serve(ctx context.Context) map[string]QueueOptions {
	e.mu.Lock()
	defer e.mu.Unlock()
	qs := maps.Clone(e.opts.Queues)
	add := func(kind, name, queue string) {
		if _, ok := qs[queue]; ok {
			return
		}
		if e.opts.queuesFromRegistrations {
			qs[queue] = QueueOptions{}.withDefaults()
			return
		}
		e.warnNotServed(ctx, kind, name, queue)
	}
	for _, name := range e.workflowTypes {
		add("workflow", name, e.workflows[name].queue)
	}
	for _, name := range e.activityTypes {
		add("activity", name, cmp.Or(e.activities[name].opts.Queue, DefaultQueue))
	}
	e.served = qs
	return qs
}

// unserve ends serve's record: Run has returned.
func (e *Engine) unserve() {
	e.mu.Lock()
	e.served = nil
	e.mu.Unlock()
}

// resolveActivity maps a function passed to workflow.ExecuteActivity to its
// registered name and options; an activity registered only on other workers
// goes by its function's name with default options.
func (e *Engine) resolveActivity(fn any) (string, activity.Options) {
	e.mu.RLock()
	name, ok := e.names[funcPC(fn)]
	var def *activityDef
	if ok {
		def = e.activities[name]
	}
	e.mu.RUnlock()
	if def != nil {
		return name, def.opts
	}
	name, err := registeredName(fn, "")
	if err != nil {
		name = "unnamed"
	}
	return name, activity.Options{Name: name}
}

// workflowName returns the name fn is registered under, or the name it
// would get.
func (e *Engine) workflowName(fn any) (name, queue string, err error) {
	e.mu.RLock()
	name, ok := e.names[funcPC(fn)]
	def := e.workflows[name]
	e.mu.RUnlock()
	if ok && def != nil {
		return name, def.queue, nil
	}
	name, err = registeredName(fn, "")
	return name, DefaultQueue, err
}

// resolveWorkflow maps a function passed to workflow.ExecuteChildWorkflow
// to its name and queue.
func (e *Engine) resolveWorkflow(fn any) (string, string) {
	name, queue, err := e.workflowName(fn)
	if err != nil {
		return "unnamed", DefaultQueue
	}
	return name, queue
}

// hasActivity reports whether this engine can run the activity name.
func (e *Engine) hasActivity(name string) bool { return e.activityDef(name) != nil }

// registered returns the names of the registered workflows (or
// activities), for the claims. Registration appends to the lists; the
// returned slice is never written again.
func (e *Engine) registered(workflows bool) []string {
	e.mu.RLock()
	defer e.mu.RUnlock()
	if workflows {
		return e.workflowTypes[:len(e.workflowTypes):len(e.workflowTypes)]
	}
	return e.activityTypes[:len(e.activityTypes):len(e.activityTypes)]
}

func funcPC(fn any) uintptr { return reflect.ValueOf(fn).Pointer() }

// registeredName returns name, or the short name of fn: "ChargeCard" for
// example.com/billing.ChargeCard, "Charge" for a method value (*Biller).Charge.
func registeredName(fn any, name string) (string, error) {
	if name != "" {
		if len(name) > 200 {
			return "", fmt.Errorf("name %.20q... is longer than 200 bytes", name)
		}
		if err := checkName("name", name, 200); err != nil {
			return "", err
		}
		return name, nil
	}
	f := runtime.FuncForPC(funcPC(fn))
	if f == nil {
		return "", fmt.Errorf("cannot name function %T: set a Name in its options", fn)
	}
	full := strings.TrimSuffix(f.Name(), "-fm")
	short := full[strings.LastIndexByte(full, '.')+1:]
	if strings.HasPrefix(short, "func") || strings.Contains(full, ".func") {
		return "", fmt.Errorf("%s is an anonymous function, which has no stable name: set a Name in its options", full)
	}
	return short, nil
}

func decodePayload(b json.RawMessage, v any) error {
	if len(b) == 0 {
		return nil
	}
	return json.Unmarshal(b, v)
}

func encodePayload(v any, limit int, what string) (json.RawMessage, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, activity.Permanent(fmt.Errorf("encode %s: %w", what, err))
	}
	if limit > 0 && len(b) > limit {
		return nil, activity.Permanent(fmt.Errorf("%s is %d bytes, over the %d-byte limit (Options.MaxPayloadBytes): pass a reference to the data instead", what, len(b), limit))
	}
	// Refused as the database would refuse it, but here, with a reason
	// that names the payload, whether or not a codec would hide it.
	if err := store.CheckPayload(b); err != nil {
		return nil, activity.Permanent(fmt.Errorf("%s: %w", what, err))
	}
	return b, nil
}

package chaos

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// logLine is the part of a worker's JSON log record the rig reads.
type logLine struct {
	Time    time.Time `json:"time"`
	Level   string    `json:"level"`
	Msg     string    `json:"msg"`
	PID     int       `json:"pid"`
	TaskID  int64     `json:"task_id"`
	Attempt int       `json:"attempt"`
	Key     string    `json:"key"`
	// IdempotencyKey is the engine's name for an activity's key.
	IdempotencyKey string `json:"idempotency_key"`
	Stale          *int   `json:"stale_writes"`
	Error          string `json:"error"`
	// Workflow is the workflow type of a task's lines.
	Workflow string `json:"workflow"`
}

// staleKind returns the write a log line says was refused by fencing, or
// "" if it says no such thing. These are the engine's Warn lines at each
// rejection; durable_stale_writes_rejected_total counts the same writes.
func staleKind(msg string) string {
	switch {
	case msg == "workflow task lease lost; its commit was refused":
		return "workflow_commit"
	case msg == "workflow task lease lost; its failure was refused":
		return "workflow_fail"
	case strings.HasSuffix(msg, ": the claim is no longer ours (a late duplicate); ignored"):
		return "activity_outcome"
	case msg == msgHeartbeatRefused:
		return "heartbeat"
	}
	return ""
}

// msgRunAheadDropped begins the engine's line for an activity attempt that
// ran ahead of its schedule, which did not commit.
const msgRunAheadDropped = "activity ran ahead of its schedule, which did not commit"

// lostWrite returns why a log line says an activity attempt's write did
// not (surely) happen, so that a later attempt runs the activity again:
// "lease_expiry" when fencing refused it (the attempt's lease had run out
// and the task was claimed again), "write_failed" when the write failed
// and may or may not have committed; "" when it says neither.
func lostWrite(l logLine) string {
	switch {
	case staleKind(l.Msg) == "activity_outcome", l.Msg == "activity attempt lost its lease; another attempt owns the task",
		strings.HasPrefix(l.Msg, msgRunAheadDropped):
		return "lease_expiry"
	case l.Msg == msgWriteFailed, strings.HasSuffix(l.Msg, "; the attempt runs again when its lease ends"):
		return "write_failed"
	}
	return ""
}

// isRetryLine reports whether a line at Warn or above is one an engine
// logs when a background loop cannot reach the database. Such lines should
// come about once per outage, not once per retry.
func isRetryLine(l logLine) bool {
	if l.Level != "WARN" && l.Level != "ERROR" {
		return false
	}
	for _, p := range []string{"database unreachable", "claim failed", "fire timers", "notification listener", "send notifications", "refresh queue gauges", msgNewFailed} {
		if strings.HasPrefix(l.Msg, p) {
			return true
		}
	}
	return false
}

// dbErrorText reports whether an error's text says the database connection
// failed: the server went away or killed the connection.
func dbErrorText(s string) bool {
	for _, p := range []string{"SQLSTATE 57P", "conn closed", "unexpected EOF", "failed to connect", "connection reset", "broken pipe", "connection refused", "shutting down", "timeout: context"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// workerLogs is what the rig learned from the workers' log files.
type workerLogs struct {
	lines int
	// stale counts fencing rejections by write; staleAt lists when each
	// happened and in which process.
	stale   map[string]int
	staleAt []pidTime
	// staleMetric sums the counter that gracefully stopped workers reported
	// at exit; staleOfStopped the log lines of those same processes.
	staleMetric, staleOfStopped int
	// lostByTask and lostByKey index lost writes by (pid, task id, attempt)
	// and (pid, idempotency key, attempt).
	lostByTask map[taskAttempt]string
	lostByKey  map[keyAttempt]string
	// droppedAhead are the attempts that ran ahead of their schedule,
	// which did not commit, by (pid, idempotency key, attempt).
	droppedAhead map[keyAttempt]bool
	// procs describes each worker process by its log file and pid: the
	// operating system reuses the pids of killed processes, in other slots
	// too.
	procs map[procKey]*procLog
	// errors are the Error lines not caused by a database fault;
	// dbErrors counts those that were (the database went away or killed
	// the connection), with one example.
	errors         []string
	dbErrors       int
	dbErrorExample string
	// deadlocks counts the Error lines of tasks of KindSpin that failed
	// with a deadlock error, as they must; starved those of other
	// workflows, whose code yields but did not run within the deadlock
	// timeout (a starved process), with one example.
	deadlocks, starved int
	starvedExample     string
}

// procKey names a worker process: its log file (one per slot) and pid.
type procKey struct{ file, pid int }

// procLog is what one worker process logged.
type procLog struct {
	first, last time.Time
	// retries counts its background retry lines.
	retries int
}

type pidTime struct {
	pid int
	at  time.Time
}

type taskAttempt struct {
	pid     int
	task    int64
	attempt int
}

type keyAttempt struct {
	pid     int
	key     string
	attempt int
}

func readWorkerLogs(paths []string) (*workerLogs, error) {
	wl := &workerLogs{
		stale: map[string]int{}, lostByTask: map[taskAttempt]string{}, lostByKey: map[keyAttempt]string{},
		droppedAhead: map[keyAttempt]bool{},
		procs:        map[procKey]*procLog{},
	}
	staleByPID := map[int]int{}
	metricByPID := map[int]int{}
	for file, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			return nil, fmt.Errorf("read worker log: %w", err)
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			var l logLine
			if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
				continue // a line cut short by SIGKILL
			}
			wl.lines++
			if k := staleKind(l.Msg); k != "" {
				wl.stale[k]++
				wl.staleAt = append(wl.staleAt, pidTime{l.PID, l.Time})
				staleByPID[l.PID]++
			}
			if strings.HasPrefix(l.Msg, msgRunAheadDropped) {
				wl.droppedAhead[keyAttempt{l.PID, l.IdempotencyKey, l.Attempt}] = true
			}
			if why := lostWrite(l); why != "" {
				if l.TaskID != 0 {
					wl.lostByTask[taskAttempt{l.PID, l.TaskID, l.Attempt}] = why
				}
				if k := cmp.Or(l.Key, l.IdempotencyKey); k != "" {
					wl.lostByKey[keyAttempt{l.PID, k, l.Attempt}] = why
				}
			}
			p := wl.procs[procKey{file, l.PID}]
			if p == nil {
				p = &procLog{first: l.Time}
				wl.procs[procKey{file, l.PID}] = p
			}
			p.last = l.Time
			if isRetryLine(l) {
				p.retries++
			}
			switch {
			case l.Level != "ERROR":
			case l.Workflow == spinName && strings.HasPrefix(l.Error, "deadlock in run "):
				wl.deadlocks++
			case strings.HasPrefix(l.Error, "deadlock in run "):
				wl.starved++
				if wl.starvedExample == "" {
					wl.starvedExample = sc.Text()
				}
			case dbErrorText(l.Error):
				wl.dbErrors++
				if wl.dbErrorExample == "" {
					wl.dbErrorExample = sc.Text()
				}
			default:
				wl.errors = append(wl.errors, fmt.Sprintf("pid %d: %s", l.PID, sc.Text()))
			}
			if l.Msg == msgWorkerStopped && l.Stale != nil {
				metricByPID[l.PID] = *l.Stale
			}
		}
		err = sc.Err()
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("read worker log %s: %w", p, err)
		}
	}
	for pid, n := range metricByPID {
		wl.staleMetric += n
		wl.staleOfStopped += staleByPID[pid]
	}
	return wl, nil
}

func (wl *workerLogs) staleTotal() int {
	n := 0
	for _, v := range wl.stale {
		n += v
	}
	return n
}

// staleWatch tails the workers' logs for a write that fencing refused, so
// the rig can go on injecting faults until a pause has made a zombie: a
// pause does not always make one (the paused worker may hold nothing
// another worker claims before it resumes, or the server may be down
// meanwhile). It is used from one goroutine.
type staleWatch struct {
	paths []string
	off   []int64
	seen  bool
	next  time.Time
}

func newStaleWatch(paths []string) *staleWatch {
	return &staleWatch{paths: paths, off: make([]int64, len(paths))}
}

// found reports whether any worker has logged a refused write so far. It
// reads what the logs gained since its last look, at most four times a
// second.
func (s *staleWatch) found() bool {
	if s.seen || time.Now().Before(s.next) {
		return s.seen
	}
	s.next = time.Now().Add(250 * time.Millisecond)
	for i, p := range s.paths {
		f, err := os.Open(p)
		if err != nil {
			continue // the worker has not started yet
		}
		b, err := io.ReadAll(io.NewSectionReader(f, s.off[i], 1<<62))
		f.Close()
		if err != nil {
			continue
		}
		// Only whole lines; the rest is read on the next look.
		end := bytes.LastIndexByte(b, '\n') + 1
		s.off[i] += int64(end)
		for line := range bytes.Lines(b[:end]) {
			var l logLine
			if bytes.Contains(line, []byte(`"level":"WARN"`)) && json.Unmarshal(line, &l) == nil && staleKind(l.Msg) != "" {
				s.seen = true
				return true
			}
		}
	}
	return false
}

// Package bad holds workflows that break the determinism contract, one
// construct at a time.
package bad

import (
	cryptorand "crypto/rand"
	"database/sql"
	"io/ioutil"
	"maps"
	"math/rand"
	randv2 "math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"syscall"
	"time"

	"github.com/durable-go/durable/workflow"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Clock is found by its signature alone: nothing registers it here.
func Clock(ctx workflow.Context, in string) (string, error) {
	_ = time.Now()                              // want `^time\.Now in workflow code is not deterministic: use workflow\.Now\(ctx\) \(reached from workflow Clock\)$`
	time.Sleep(time.Second)                     // want `^time\.Sleep in workflow code is not deterministic: use workflow\.Sleep\(ctx, d\) \(reached from workflow Clock\)$`
	<-time.After(time.Second)                   // want `time\.After .*use workflow\.NewTimer\(ctx, d\)` `channel receive in workflow code: use a workflow\.Channel and ch\.Receive\(ctx\)`
	_ = time.Tick(time.Second)                  // want `time\.Tick .*use workflow\.Sleep\(ctx, d\) in a loop`
	_ = time.NewTimer(time.Second)              // want `time\.NewTimer .*use workflow\.NewTimer\(ctx, d\)`
	_ = time.NewTicker(time.Second)             // want `time\.NewTicker .*use workflow\.Sleep\(ctx, d\) in a loop`
	_ = time.Since(time.Time{})                 // want `time\.Since .*use workflow\.Now\(ctx\)\.Sub\(t\)`
	_ = time.Until(time.Time{})                 // want `time\.Until .*use t\.Sub\(workflow\.Now\(ctx\)\)`
	_ = time.AfterFunc(time.Second, func() {})  // want `time\.AfterFunc .*use workflow\.NewTimer`
	_ = workflow.Now(ctx).Add(time.Hour).Unix() // the time.Time value itself is fine
	_ = time.Duration(3) * time.Second          // so are durations
	return in, nil
}

// Concurrency uses the go and select statements and Go channels.
func Concurrency(ctx workflow.Context, in int) (int, error) {
	ch := make(chan int, 1)
	done := make(chan struct{})
	go func() { // want `^go statement in workflow code: use workflow\.Go\(ctx, fn\) \(reached from workflow Concurrency\)$`
		ch <- in // want `^channel send in workflow code: use a workflow\.Channel and ch\.Send\(ctx, v\) \(reached from workflow Concurrency\)$`
	}()
	select { // want `^select statement in workflow code: use workflow\.NewSelector\(ctx\) \(reached from workflow Concurrency\)$`
	case v := <-ch:
		in = v
	case done <- struct{}{}:
	case <-time.After(time.Second): // want `time\.After`
	}
	v := <-ch           // want `channel receive in workflow code`
	for x := range ch { // want `^range over channel in workflow code: use a workflow\.Channel and ch\.Receive\(ctx\) in a loop \(reached from workflow Concurrency\)$`
		v += x
	}
	return v, nil
}

// Random draws random values outside SideEffect.
func Random(ctx workflow.Context, in int) (int, error) {
	n := rand.Intn(10)                          // want `^math/rand\.Intn in workflow code is not deterministic: draw the value inside workflow\.SideEffect \(reached from workflow Random\)$`
	r := rand.New(rand.NewSource(1))            // want `math/rand\.New in` `math/rand\.NewSource in`
	n += r.Intn(3)                              // want `\(\*math/rand\.Rand\)\.Intn in workflow code is not deterministic`
	n += randv2.IntN(10)                        // want `math/rand/v2\.IntN in workflow code is not deterministic`
	_, _ = cryptorand.Read(make([]byte, 8))     // want `crypto/rand\.Read in workflow code is not deterministic`
	_ = uuid.NewString()                        // want `github\.com/google/uuid\.NewString in workflow code is not deterministic: draw the value inside workflow\.SideEffect`
	_ = uuid.NewSHA1(uuid.UUID{}, nil).String() // name-based UUIDs are deterministic
	return n, nil
}

// Maps ranges over maps.
func Maps(ctx workflow.Context, m map[string]int) (int, error) {
	total := 0
	for _, v := range m { // want `^range over map: iteration order is random; sort the keys: slices\.Sorted\(maps\.Keys\(m\)\) \(reached from workflow Maps\)$`
		total += v
	}
	for k := range maps.Keys(m) { // want `range over maps\.Keys: iteration order is random`
		total += len(k)
	}
	for _, k := range slices.Sorted(maps.Keys(m)) { // sorted: fine
		total += m[k]
	}
	return total, nil
}

// IO does I/O that belongs in activities.
func IO(ctx workflow.Context, db *sql.DB) (string, error) {
	b, _ := os.ReadFile("config.json")             // want `^os\.ReadFile in workflow code does I/O that every replay repeats: do it in an activity and call that with workflow\.ExecuteActivity \(reached from workflow IO\)$`
	_ = os.Getenv("REGION")                        // want `^os\.Getenv in workflow code reads configuration that can change before a replay: read it where the run is started and pass it in the input`
	_, _ = http.Get("https://example.com")         // want `net/http\.Get in workflow code does I/O`
	_, _ = net.Dial("tcp", "127.0.0.1:1")          // want `net\.Dial in workflow code does I/O`
	_ = db.Ping()                                  // want `\(\*database/sql\.DB\)\.Ping in workflow code does I/O`
	_ = exec.Command("true").Run()                 // want `os/exec\.Command in` `\(\*os/exec\.Cmd\)\.Run in`
	_ = syscall.Getpid()                           // want `syscall\.Getpid in workflow code does I/O`
	_, _ = ioutil.ReadFile("x")                    // want `io/ioutil\.ReadFile in workflow code does I/O`
	_ = (*pgxpool.Pool)(nil).Exec(nil, "SELECT 1") // want `\(\*github\.com/jackc/pgx/v5/pgxpool\.Pool\)\.Exec in workflow code does I/O`
	_ = os.IsNotExist(nil)                         // looks only at its argument
	_ = net.JoinHostPort("h", "1")                 // so does this
	return string(b), nil
}

// Helpers reaches its findings through functions of this package.
func Helpers(ctx workflow.Context, in int) (int, error) {
	s := stamper{}
	workflow.Go(ctx, background)
	return deadline(ctx) + s.stamp(), nil
}

func deadline(ctx workflow.Context) int {
	return pause() + int(time.Now().Unix()) // want `^time\.Now in workflow code is not deterministic: use workflow\.Now\(ctx\) \(reached from workflow Helpers via deadline\)$`
}

func pause() int {
	time.Sleep(time.Millisecond) // want `^time\.Sleep in workflow code is not deterministic: use workflow\.Sleep\(ctx, d\) \(reached from workflow Helpers via deadline -> pause; also from Reused\)$`
	return 0
}

type stamper struct{}

func (stamper) stamp() int {
	return rand.Int() // want `\(reached from workflow Helpers via stamper\.stamp\)$`
}

func background(ctx workflow.Context) {
	_ = os.Getpid() // want `os\.Getpid in workflow code does I/O .*\(reached from workflow Helpers via background\)$`
}

// Reused shares a helper with Helpers: the finding is reported once.
func Reused(ctx workflow.Context, in int) (int, error) {
	return pause(), nil
}

// Silenced has reviewed lines.
func Silenced(ctx workflow.Context, in int) (int, error) {
	_ = time.Now() //durable:nondeterministic-ok logged only, never compared
	//durable:nondeterministic-ok the seed is fixed, so the sequence is too
	r := rand.New(rand.NewSource(42))
	// want +1 `^//durable:nondeterministic-ok needs a reason: say why this line is safe to replay$`
	//durable:nondeterministic-ok
	n := r.Intn(10)
	//durable:nondeterministic-oklahoma is not the directive
	_ = time.Now() // want `time\.Now in workflow code`
	return n, nil
}

// notWorkflow has the wrong shape and is not reached: anything goes.
func notWorkflow(in int) (int, error) {
	go func() {}()
	return int(time.Now().Unix()), nil
}

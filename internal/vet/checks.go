package vet

import (
	"fmt"
	"go/ast"
	"go/token"
	"go/types"
	"strings"

	"golang.org/x/tools/go/types/typeutil"
)

// scanner scans the units of one package, each once.
type scanner struct {
	info  *types.Info
	units map[*types.Func]*unit
	scans map[*unit]*scan
}

// scan is what one unit's body holds: its findings, and the units of the
// same package that it calls or passes as function values.
type scan struct {
	findings []finding
	callees  []*unit
}

// timeFuncs maps the time functions that read the clock or block to what
// workflow code uses instead.
var timeFuncs = map[string]string{
	"Now":       "workflow.Now(ctx)",
	"Since":     "workflow.Now(ctx).Sub(t)",
	"Until":     "t.Sub(workflow.Now(ctx))",
	"Sleep":     "workflow.Sleep(ctx, d)",
	"After":     "workflow.NewTimer(ctx, d)",
	"AfterFunc": "workflow.NewTimer(ctx, d) and workflow.Go",
	"NewTimer":  "workflow.NewTimer(ctx, d)",
	"Tick":      "workflow.Sleep(ctx, d) in a loop",
	"NewTicker": "workflow.Sleep(ctx, d) in a loop",
}

// ioPackages are the packages whose functions and methods do I/O.
var ioPackages = map[string]bool{
	"os":           true,
	"os/exec":      true,
	"syscall":      true,
	"io/ioutil":    true,
	"net":          true,
	"net/http":     true,
	"database/sql": true,
}

const pgxPath = "github.com/jackc/pgx/v5"

// pureIO are functions of the I/O packages that only look at their
// arguments.
var pureIO = map[string]bool{
	"os.IsExist":                  true,
	"os.IsNotExist":               true,
	"os.IsPermission":             true,
	"os.IsTimeout":                true,
	"net.JoinHostPort":            true,
	"net.SplitHostPort":           true,
	"net.ParseIP":                 true,
	"net.ParseCIDR":               true,
	"net/http.StatusText":         true,
	"net/http.CanonicalHeaderKey": true,
}

// configFuncs read configuration that can change between runs.
var configFuncs = map[string]bool{
	"os.Getenv":    true,
	"os.LookupEnv": true,
	"os.Environ":   true,
	"os.Hostname":  true,
	"os.Getwd":     true,
}

// uuidFuncs are the random constructors of github.com/google/uuid.
var uuidFuncs = map[string]bool{
	"New":       true,
	"NewString": true,
	"NewRandom": true,
	"NewUUID":   true,
	"NewV6":     true,
	"NewV7":     true,
}

// callMessage says what is wrong with calling fn from workflow code, or
// returns "" when nothing is.
func callMessage(fn *types.Func) string {
	if fn.Pkg() == nil {
		return ""
	}
	path, name := fn.Pkg().Path(), fn.FullName()
	isPkgFunc := fn.Signature().Recv() == nil
	switch {
	case path == "time" && isPkgFunc && timeFuncs[fn.Name()] != "":
		return fmt.Sprintf("%s in workflow code is not deterministic: use %s", name, timeFuncs[fn.Name()])
	case path == "math/rand" || path == "math/rand/v2" || path == "crypto/rand",
		path == "github.com/google/uuid" && isPkgFunc && uuidFuncs[fn.Name()]:
		return fmt.Sprintf("%s in workflow code is not deterministic: draw the value inside workflow.SideEffect", name)
	case configFuncs[name]:
		return fmt.Sprintf("%s in workflow code reads configuration that can change before a replay: read it where the run is started and pass it in the input", name)
	case (ioPackages[path] || path == pgxPath || strings.HasPrefix(path, pgxPath+"/")) && !pureIO[name]:
		return fmt.Sprintf("%s in workflow code does I/O that every replay repeats: do it in an activity and call that with workflow.ExecuteActivity", name)
	}
	return ""
}

// scan returns what u's body holds, scanning it on first use.
func (c *scanner) scan(u *unit) *scan {
	if s, ok := c.scans[u]; ok {
		return s
	}
	s := &scan{}
	c.scans[u] = s
	seen := map[*unit]bool{}
	addCallee := func(fn *types.Func) {
		if callee := c.units[fn]; callee != nil && !seen[callee] {
			seen[callee] = true
			s.callees = append(s.callees, callee)
		}
	}
	report := func(n ast.Node, format string, args ...any) {
		s.findings = append(s.findings, finding{pos: n.Pos(), msg: fmt.Sprintf(format, args...)})
	}
	// inSelect holds the channel operations of select cases, which the
	// select statement's finding covers.
	inSelect := map[ast.Node]bool{}

	var visit func(n ast.Node) bool
	visit = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.FuncLit:
			// A func literal that takes a context.Context is an activity
			// written in place.
			if sig, ok := c.info.TypeOf(n).(*types.Signature); ok && isActivitySignature(sig) {
				return false
			}
		case *ast.GoStmt:
			report(n, "go statement in workflow code: use workflow.Go(ctx, fn)")
		case *ast.SelectStmt:
			report(n, "select statement in workflow code: use workflow.NewSelector(ctx)")
			for _, cl := range n.Body.List {
				switch comm := cl.(*ast.CommClause).Comm.(type) {
				case *ast.SendStmt:
					inSelect[comm] = true
				case *ast.ExprStmt:
					inSelect[ast.Unparen(comm.X)] = true
				case *ast.AssignStmt:
					inSelect[ast.Unparen(comm.Rhs[0])] = true
				}
			}
		case *ast.SendStmt:
			if !inSelect[n] {
				report(n, "channel send in workflow code: use a workflow.Channel and ch.Send(ctx, v)")
			}
		case *ast.UnaryExpr:
			if n.Op == token.ARROW && !inSelect[n] {
				report(n, "channel receive in workflow code: use a workflow.Channel and ch.Receive(ctx)")
			}
		case *ast.RangeStmt:
			c.checkRange(n, report)
		case *ast.CallExpr:
			callee, _ := typeutil.Callee(c.info, n).(*types.Func)
			if callee != nil {
				if msg := callMessage(callee); msg != "" {
					report(n, "%s", msg)
				}
			}
			if static := typeutil.StaticCallee(c.info, n); static != nil {
				addCallee(static.Origin())
			}
			// The function given to SideEffect runs once and is recorded;
			// the one given to ExecuteActivity is an activity. Neither is
			// workflow code.
			if isFunc(callee, workflowPath, "SideEffect") || isFunc(callee, workflowPath, "ExecuteActivity") {
				ast.Inspect(n.Fun, visit)
				for i, arg := range n.Args {
					if i != 1 {
						ast.Inspect(arg, visit)
					}
				}
				return false
			}
			// A function of this package passed as a value (to workflow.Go,
			// a Selector callback, sort.Slice...) runs as workflow code,
			// unless it takes a context.Context and so is an activity.
			for _, arg := range n.Args {
				if fn := funcRef(c.info, arg); fn != nil && !isActivitySignature(fn.Signature()) {
					addCallee(fn)
				}
			}
		}
		return true
	}
	ast.Inspect(u.body, visit)
	return s
}

// checkRange reports range over a map, over maps.Keys, maps.Values or
// maps.All, and over a Go channel.
func (c *scanner) checkRange(n *ast.RangeStmt, report func(ast.Node, string, ...any)) {
	if call, ok := ast.Unparen(n.X).(*ast.CallExpr); ok {
		fn, _ := typeutil.Callee(c.info, call).(*types.Func)
		if isFunc(fn, "maps", "Keys") || isFunc(fn, "maps", "Values") || isFunc(fn, "maps", "All") {
			report(n, "range over maps.%s: iteration order is random; sort the keys: slices.Sorted(maps.Keys(m))", fn.Name())
			return
		}
	}
	t := c.info.TypeOf(n.X)
	if t == nil {
		return
	}
	switch t.Underlying().(type) {
	case *types.Map:
		report(n, "range over map: iteration order is random; sort the keys: slices.Sorted(maps.Keys(m))")
	case *types.Chan:
		report(n, "range over channel in workflow code: use a workflow.Channel and ch.Receive(ctx) in a loop")
	}
}

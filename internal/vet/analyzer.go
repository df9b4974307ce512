package vet

import (
	"cmp"
	"fmt"
	"go/ast"
	"go/constant"
	"go/token"
	"go/types"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/types/typeutil"
)

const (
	workflowPath = "github.com/durable-go/durable/workflow"
	enginePath   = "github.com/durable-go/durable/engine"
)

// Analyzer reports non-deterministic constructs reachable from workflow
// functions. See the package documentation for what it reports and how to
// silence a reviewed line.
var Analyzer = &analysis.Analyzer{
	Name: "durablevet",
	Doc: `report non-deterministic code in durable workflows

Workflow code is replayed from history and must give the same commands on
every replay. durablevet reports, in workflow functions and the same-package
functions they call, what breaks that: time.Now and time.Sleep, the go and
select statements, Go channels, range over maps, math/rand and crypto/rand,
and I/O (os, net, net/http, database/sql, pgx...), each with the workflow
API to use instead. Silence a reviewed line with a comment on it or above it:

	//durable:nondeterministic-ok <reason>`,
	Run: run,
}

// unit is a piece of workflow code: a function declaration, or a func
// literal registered as a workflow.
type unit struct {
	name string
	node ast.Node // *ast.FuncDecl or *ast.FuncLit
	body *ast.BlockStmt
}

// finding is one non-deterministic construct, before the analyzer knows
// which workflows reach it.
type finding struct {
	pos token.Pos
	msg string
}

// reach records which workflows reach a finding, and the path from the
// first of them.
type reach struct {
	finding
	roots []string
	via   []string
}

func run(pass *analysis.Pass) (any, error) {
	silenced := readDirectives(pass)

	units := map[*types.Func]*unit{}
	for _, f := range pass.Files {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			if fn, ok := pass.TypesInfo.Defs[fd.Name].(*types.Func); ok {
				units[fn] = &unit{name: funcName(fn), node: fd, body: fd.Body}
			}
		}
	}

	c := &scanner{info: pass.TypesInfo, units: units, scans: map[*unit]*scan{}}
	reaches := map[finding]*reach{}
	for _, root := range roots(pass, units) {
		c.walk(root, func(u *unit, path []*unit) {
			for _, f := range c.scan(u).findings {
				r, ok := reaches[f]
				if !ok {
					r = &reach{finding: f}
					for _, p := range path[1:] {
						r.via = append(r.via, p.name)
					}
					reaches[f] = r
				}
				if !slices.Contains(r.roots, root.name) {
					r.roots = append(r.roots, root.name)
				}
			}
		})
	}

	all := make([]*reach, 0, len(reaches))
	for _, r := range reaches {
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *reach) int {
		return cmp.Or(cmp.Compare(a.pos, b.pos), strings.Compare(a.msg, b.msg))
	})
	for _, r := range all {
		if silenced.covers(pass.Fset.Position(r.pos)) {
			continue
		}
		pass.Report(analysis.Diagnostic{Pos: r.pos, Message: r.msg + " " + r.origin()})
	}
	return nil, nil
}

// origin says which workflows reach the finding: "(reached from workflow
// Onboard via stamp; also from Refund)".
func (r *reach) origin() string {
	var b strings.Builder
	b.WriteString("(reached from workflow ")
	b.WriteString(r.roots[0])
	if len(r.via) > 0 {
		b.WriteString(" via ")
		b.WriteString(strings.Join(r.via, " -> "))
	}
	if len(r.roots) > 1 {
		b.WriteString("; also from ")
		b.WriteString(strings.Join(r.roots[1:], ", "))
	}
	b.WriteString(")")
	return b.String()
}

// walk calls visit for root and every unit reachable from it, once each, in
// breadth-first order, with the shortest call path from root.
func (c *scanner) walk(root *unit, visit func(u *unit, path []*unit)) {
	paths := map[*unit][]*unit{root: {root}}
	queue := []*unit{root}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		visit(u, paths[u])
		for _, next := range c.scan(u).callees {
			if _, seen := paths[next]; seen {
				continue
			}
			paths[next] = append(slices.Clip(paths[u]), next)
			queue = append(queue, next)
		}
	}
}

// roots returns the package's workflow functions in source order: every
// top-level function shaped func(workflow.Context, In) (Out, error), and
// every function of this package or func literal given to
// engine.RegisterWorkflow.
func roots(pass *analysis.Pass, units map[*types.Func]*unit) []*unit {
	seen := map[ast.Node]bool{}
	var out []*unit
	add := func(u *unit) {
		if !seen[u.node] {
			seen[u.node] = true
			out = append(out, u)
		}
	}
	for fn, u := range units {
		if fn.Signature().Recv() == nil && isWorkflowSignature(fn.Signature()) {
			add(u)
		}
	}
	for _, f := range pass.Files {
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 || !isFunc(typeutil.StaticCallee(pass.TypesInfo, call), enginePath, "RegisterWorkflow") {
				return true
			}
			switch arg := ast.Unparen(call.Args[1]).(type) {
			case *ast.FuncLit:
				name := registeredName(pass.TypesInfo, call)
				if name == "" {
					p := pass.Fset.Position(arg.Pos())
					name = fmt.Sprintf("func literal at %s:%d", filepath.Base(p.Filename), p.Line)
				}
				add(&unit{name: name, node: arg, body: arg.Body})
			default:
				if u := units[funcRef(pass.TypesInfo, arg)]; u != nil {
					add(u)
				}
			}
			return true
		})
	}
	slices.SortFunc(out, func(a, b *unit) int { return cmp.Compare(a.node.Pos(), b.node.Pos()) })
	return out
}

// registeredName returns the constant Name in RegisterWorkflow's options
// literal, if there is one.
func registeredName(info *types.Info, call *ast.CallExpr) string {
	if len(call.Args) < 3 {
		return ""
	}
	lit, ok := ast.Unparen(call.Args[2]).(*ast.CompositeLit)
	if !ok {
		return ""
	}
	for _, e := range lit.Elts {
		kv, ok := e.(*ast.KeyValueExpr)
		if !ok {
			continue
		}
		if key, ok := kv.Key.(*ast.Ident); ok && key.Name == "Name" {
			if tv := info.Types[kv.Value]; tv.Value != nil && tv.Value.Kind() == constant.String {
				return constant.StringVal(tv.Value)
			}
		}
	}
	return ""
}

// funcRef returns the function or method that e names (F, pkg.F, F[int],
// x.M, T.M), or nil.
func funcRef(info *types.Info, e ast.Expr) *types.Func {
	e = ast.Unparen(e)
	switch x := e.(type) {
	case *ast.IndexExpr:
		e = x.X
	case *ast.IndexListExpr:
		e = x.X
	}
	var obj types.Object
	switch x := ast.Unparen(e).(type) {
	case *ast.Ident:
		obj = info.Uses[x]
	case *ast.SelectorExpr:
		if sel := info.Selections[x]; sel != nil {
			if sel.Kind() == types.FieldVal {
				return nil
			}
			obj = sel.Obj()
		} else {
			obj = info.Uses[x.Sel]
		}
	}
	if fn, ok := obj.(*types.Func); ok {
		return fn.Origin()
	}
	return nil
}

// isWorkflowSignature reports whether sig is func(workflow.Context, In) (Out, error).
func isWorkflowSignature(sig *types.Signature) bool {
	return sig.Params().Len() == 2 && !sig.Variadic() && sig.Results().Len() == 2 &&
		isNamed(sig.Params().At(0).Type(), workflowPath, "Context") &&
		types.Identical(sig.Results().At(1).Type(), types.Universe.Lookup("error").Type())
}

// isActivitySignature reports whether sig's first parameter is a
// context.Context, as an activity's is.
func isActivitySignature(sig *types.Signature) bool {
	return sig.Params().Len() > 0 && isNamed(sig.Params().At(0).Type(), "context", "Context")
}

func isNamed(t types.Type, path, name string) bool {
	n, ok := types.Unalias(t).(*types.Named)
	if !ok {
		return false
	}
	obj := n.Obj()
	return obj.Pkg() != nil && obj.Pkg().Path() == path && obj.Name() == name
}

// isFunc reports whether fn is the package-level function path.name.
func isFunc(fn *types.Func, path, name string) bool {
	return fn != nil && fn.Pkg() != nil && fn.Pkg().Path() == path && fn.Name() == name && fn.Signature().Recv() == nil
}

// funcName names a function as a reader finds it in the source: "stamp",
// "Biller.Charge".
func funcName(fn *types.Func) string {
	recv := fn.Signature().Recv()
	if recv == nil {
		return fn.Name()
	}
	t := recv.Type()
	if p, ok := t.(*types.Pointer); ok {
		t = p.Elem()
	}
	if n, ok := types.Unalias(t).(*types.Named); ok {
		return n.Obj().Name() + "." + fn.Name()
	}
	return fn.Name()
}

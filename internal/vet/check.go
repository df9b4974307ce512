package vet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"go/token"
	"io"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"
)

// Check runs the analyzer on the packages that patterns name, loaded from
// dir ("" for the current directory) with their tests, and writes each
// finding to w as "file:line:col: message", with paths relative to dir. It
// returns the number of findings. An error means the packages could not be
// loaded, type-checked or analyzed.
//
// Check is for commands that embed the analyzer and choose their own exit
// codes; cmd/durable-vet uses the go/analysis driver instead.
func Check(ctx context.Context, w io.Writer, dir string, patterns ...string) (int, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return 0, err
	}
	cfg := &packages.Config{Context: ctx, Dir: abs, Mode: packages.LoadAllSyntax, Tests: true}
	pkgs, err := packages.Load(cfg, patterns...)
	if err != nil {
		return 0, fmt.Errorf("load %s: %w", strings.Join(patterns, " "), err)
	}
	var loadErrs []error
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			loadErrs = append(loadErrs, e)
		}
	})
	if len(loadErrs) > 0 {
		return 0, fmt.Errorf("load %s: %w", strings.Join(patterns, " "), errors.Join(loadErrs...))
	}
	g, err := checker.Analyze([]*analysis.Analyzer{Analyzer}, pkgs, nil)
	if err != nil {
		return 0, fmt.Errorf("analyze %s: %w", strings.Join(patterns, " "), err)
	}

	type found struct {
		pos token.Position
		msg string
	}
	// A file of package p is also in p's test variant: report it once.
	seen := map[found]bool{}
	var all []found
	for act := range g.All() {
		if !act.IsRoot {
			continue
		}
		if act.Err != nil {
			return 0, fmt.Errorf("analyze %s: %w", act.Package.PkgPath, act.Err)
		}
		for _, d := range act.Diagnostics {
			f := found{act.Package.Fset.Position(d.Pos), d.Message}
			if !seen[f] {
				seen[f] = true
				all = append(all, f)
			}
		}
	}
	slices.SortFunc(all, func(a, b found) int {
		return cmp.Or(strings.Compare(a.pos.Filename, b.pos.Filename),
			cmp.Compare(a.pos.Line, b.pos.Line), cmp.Compare(a.pos.Column, b.pos.Column),
			strings.Compare(a.msg, b.msg))
	})
	for _, f := range all {
		if rel, err := filepath.Rel(abs, f.pos.Filename); err == nil && !strings.HasPrefix(rel, "..") {
			f.pos.Filename = rel
		}
		if _, err := fmt.Fprintf(w, "%s: %s\n", f.pos, f.msg); err != nil {
			return 0, err
		}
	}
	return len(all), nil
}

package vet

import (
	"go/token"
	"strings"

	"golang.org/x/tools/go/analysis"
)

// directive silences the findings on its line and the next. A reason must
// follow it.
const directive = "//durable:nondeterministic-ok"

// silenced holds, per file, the lines that a directive covers.
type silenced map[string]map[int]bool

func (s silenced) covers(p token.Position) bool { return s[p.Filename][p.Line] }

// readDirectives finds the package's directives and reports those without
// a reason. A directive without a reason still silences its lines, so that
// its own diagnostic is the one that says what to fix.
func readDirectives(pass *analysis.Pass) silenced {
	s := silenced{}
	for _, f := range pass.Files {
		for _, group := range f.Comments {
			for _, c := range group.List {
				rest, ok := strings.CutPrefix(c.Text, directive)
				if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
					continue
				}
				if strings.TrimSpace(rest) == "" {
					pass.Report(analysis.Diagnostic{
						Pos:     c.Pos(),
						End:     c.End(),
						Message: directive + " needs a reason: say why this line is safe to replay",
					})
				}
				p := pass.Fset.Position(c.Pos())
				if s[p.Filename] == nil {
					s[p.Filename] = map[int]bool{}
				}
				s[p.Filename][p.Line] = true
				s[p.Filename][p.Line+1] = true
			}
		}
	}
	return s
}

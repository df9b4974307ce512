// Command durable-vet reports non-deterministic code in durable workflows:
// time.Now, time.Sleep, go and select statements, Go channels, range over
// maps, randomness and I/O reachable from a workflow function, each with the
// workflow API to use instead.
//
//	go run ./cmd/durable-vet ./...
//
// Silence a reviewed line with a comment on it or on the line above:
//
//	//durable:nondeterministic-ok <reason>
//
// It exits 3 when it reports something. Run it with -help for the flags.
package main

import (
	"golang.org/x/tools/go/analysis/singlechecker"

	"github.com/durable-go/durable/internal/vet"
)

func main() { singlechecker.Main(vet.Analyzer) }

package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/durable-go/durable/internal/vet"
)

func (a *app) vetCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "vet [packages]",
		Short: "Report non-deterministic code reachable from workflow functions",
		Long: `vet loads the packages (default ./...) and reports calls that would make
workflow code non-deterministic when replayed: time.Now and time.Sleep, go
statements, select and Go channel operations, math/rand, ranging over maps, and
I/O (os, net, net/http, database/sql, pgx), reachable from functions registered
with engine.RegisterWorkflow or shaped func(workflow.Context, T) (U, error).
Each finding names the replacement to use. Silence a reviewed line with a
comment on it or the line above:

  //durable:nondeterministic-ok <reason>

Exit codes: 0 nothing found, 1 findings or a package that does not load.`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				args = []string{"./..."}
			}
			n, err := vet.Check(cmd.Context(), cmd.OutOrStdout(), ".", args...)
			if err != nil {
				return &exitError{code: exitFailure, err: fmt.Errorf("vet: %w", err)}
			}
			if n > 0 {
				return &exitError{code: exitFailure, err: fmt.Errorf("vet: %d finding(s) in workflow code", n)}
			}
			return nil
		},
	}
}

package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVetFindsNothingInTheExamples(t *testing.T) {
	t.Parallel()
	r := durable(t, "", "vet", "../../examples/...")
	requireCode(t, 0, r)
	require.Empty(t, r.stdout)
}

func TestVetReportsWorkflowCode(t *testing.T) {
	t.Parallel()
	r := durable(t, "", "vet", "./testdata/vetbad")
	requireCode(t, 1, r)
	require.Contains(t, r.stdout, "flow.go:12")
	require.Contains(t, r.stdout, "time.Now in workflow code is not deterministic: use workflow.Now(ctx)")
	require.Contains(t, r.stderr, "1 finding(s) in workflow code")
}

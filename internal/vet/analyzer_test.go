package vet_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/durable-go/durable/internal/vet"
)

func TestAnalyzerIsValid(t *testing.T) {
	t.Parallel()
	require.Equal(t, "durablevet", vet.Analyzer.Name)
	require.NoError(t, analysis.Validate([]*analysis.Analyzer{vet.Analyzer}))
}

// TestBad checks every reported construct, the workflow each names, helpers
// reached from workflows, registered workflows and the directive.
func TestBad(t *testing.T) {
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "bad")
}

// TestClean checks that a workflow using only the workflow API, activities
// and plain functions get no diagnostics.
func TestClean(t *testing.T) {
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), vet.Analyzer, "clean")
}

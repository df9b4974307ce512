package vet_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/vet"
)

// module writes a module named github.com/durable-go/durable with a
// one-line workflow package and the given files, and returns its directory.
func module(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["go.mod"] = "module github.com/durable-go/durable\n\ngo 1.26\n"
	files["workflow/workflow.go"] = "package workflow\n\ntype Context struct{}\n"
	for name, content := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
	return dir
}

func TestCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		files   map[string]string
		want    string
		wantN   int
		wantErr string
	}{
		{
			name: "FindingOnceThoughTestsLoadThePackageTwice",
			files: map[string]string{
				"app/app.go": `package app

import (
	"time"

	"github.com/durable-go/durable/workflow"
)

func Onboard(ctx workflow.Context, in int) (int64, error) {
	return time.Now().Unix() + int64(in), nil
}
`,
				"app/app_test.go": "package app\n\nimport \"testing\"\n\nfunc TestX(t *testing.T) {}\n",
			},
			want:  "app/app.go:10:9: time.Now in workflow code is not deterministic: use workflow.Now(ctx) (reached from workflow Onboard)\n",
			wantN: 1,
		},
		{
			name:  "Clean",
			files: map[string]string{"app/app.go": "package app\n\nfunc Add(a, b int) int { return a + b }\n"},
		},
		{
			name:    "TypeErrorIsAnError",
			files:   map[string]string{"app/app.go": "package app\n\nfunc Add() int { return \"x\" }\n"},
			wantErr: "app.go:3",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := module(t, tt.files)
			var out bytes.Buffer
			n, err := vet.Check(t.Context(), &out, dir, "./...")
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantN, n)
			require.Equal(t, tt.want, out.String())
		})
	}
}

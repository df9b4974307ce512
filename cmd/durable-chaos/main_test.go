package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/internal/chaos"
)

func TestParseFlags(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		args []string
		want func(o *chaos.Options)
	}{
		{name: "long mode by default", args: nil, want: func(*chaos.Options) {}},
		{name: "sizes", args: []string{"-workflows", "5", "-duration", "1m", "-workers", "4"}, want: func(o *chaos.Options) {
			o.Workflows, o.Duration, o.Workers, o.UpgradeAt = 5, time.Minute, 4, 30*time.Second
		}},
		{name: "a fault off", args: []string{"-pg-stop-every", "0"}, want: func(o *chaos.Options) { o.PGStopEvery = 0 }},
		{name: "clock skews", args: []string{"-clock-skews", "1s, -2m,3h"}, want: func(o *chaos.Options) {
			o.ClockSkews = []time.Duration{time.Second, -2 * time.Minute, 3 * time.Hour}
		}},
		{name: "no clock skews", args: []string{"-clock-skews", ""}, want: func(o *chaos.Options) { o.ClockSkews = nil }},
		{name: "workload parts off", args: []string{"-spin-every", "0", "-upgrade-at", "0", "-wrong-key-signals=false"}, want: func(o *chaos.Options) {
			o.SpinEvery, o.UpgradeAt, o.WrongKeySignals = 0, 0, false
		}},
		{name: "short", args: []string{"-short"}, want: func(o *chaos.Options) {
			*o = chaos.ShortOptions()
		}},
		{name: "short with an explicit flag", args: []string{"-short", "-duration", "1m"}, want: func(o *chaos.Options) {
			*o = chaos.ShortOptions()
			o.Duration, o.UpgradeAt = time.Minute, 30*time.Second
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := parseFlags(tt.args, &bytes.Buffer{})
			require.NoError(t, err)
			want := longOptions()
			tt.want(&want)
			require.Equal(t, want, got)
		})
	}
}

func TestBadFlagsExit2(t *testing.T) {
	t.Parallel()
	var stderr bytes.Buffer
	require.Equal(t, 2, run(context.Background(), []string{"-workflows", "many"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "invalid value")
	require.Equal(t, 2, run(context.Background(), []string{"extra"}, &bytes.Buffer{}, &stderr))
	require.Equal(t, 0, run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &stderr))
	require.Contains(t, stderr.String(), "-pg-stop-every")
}

package main

import (
	"testing"

	"github.com/durable-go/durable/engine"
)

// BenchmarkReplay replays W4's history of 10,000 events from memory, as
// -workloads W4 does, for a CPU profile of replay alone:
//
//	go test -run '^$' -bench Replay -cpuprofile cpu.out ./cmd/durable-bench/
func BenchmarkReplay(b *testing.B) {
	h, err := loopHistory(4999)
	if err != nil {
		b.Fatal(err)
	}
	rp, err := engine.NewReplayer(engine.ReplayerOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if err := register(rp); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := rp.Replay(b.Context(), h); err != nil {
			b.Fatal(err)
		}
	}
}

package durable_test

import (
	"bytes"
	"context"
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/examples/onboarding/onboard"
	"github.com/durable-go/durable/examples/ordersaga/checkout"
	"github.com/durable-go/durable/history"
	"github.com/durable-go/durable/internal/pgtest"
)

var update = flag.Bool("update", false, "record testdata/histories again from the examples")

// register registers every example's workflows on e.
func register(e *engine.Engine) error {
	if err := onboard.Register(e); err != nil {
		return err
	}
	return checkout.Register(e, &checkout.Activities{})
}

// scenarios are the example runs whose histories are recorded: name, and a
// function that runs the example under the test environment and returns
// its workflow ID.
var scenarios = []struct {
	name string
	run  func(ctx context.Context, t *testing.T, env *durabletest.Env) string
}{
	{"onboarding-nudged", func(ctx context.Context, t *testing.T, env *durabletest.Env) string {
		onboard.Configure(io.Discard, false)
		return startOnboarding(ctx, t, env)
	}},
	{"onboarding-completed", func(ctx context.Context, t *testing.T, env *durabletest.Env) string {
		onboard.Configure(io.Discard, true)
		return startOnboarding(ctx, t, env)
	}},
	{"ordersaga-shipped", func(ctx context.Context, t *testing.T, env *durabletest.Env) string {
		o := checkout.Order{ID: "A-1001", SKU: "BOOK-42", Qty: 2, Cents: 4900, Card: "card_4242", Country: "NL"}
		r, err := engine.Start(ctx, env.Engine, checkout.PlaceOrder, o, engine.StartOptions{ID: "order:" + o.ID})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.NoError(t, err)
		return r.WorkflowID
	}},
	{"ordersaga-ship-refused", func(ctx context.Context, t *testing.T, env *durabletest.Env) string {
		o := checkout.Order{ID: "A-1002", SKU: "BOOK-42", Qty: 2, Cents: 4900, Card: "card_4242", Country: checkout.NoServiceCountry}
		r, err := engine.Start(ctx, env.Engine, checkout.PlaceOrder, o, engine.StartOptions{ID: "order:" + o.ID})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.ErrorContains(t, err, "carrier does not ship to AQ; compensated", "refunded and released")
		return r.WorkflowID
	}},
	{"ordersaga-card-declined", func(ctx context.Context, t *testing.T, env *durabletest.Env) string {
		o := checkout.Order{ID: "A-1003", SKU: "BOOK-42", Qty: 2, Cents: 4900, Card: checkout.DeclinedCard, Country: "NL"}
		r, err := engine.Start(ctx, env.Engine, checkout.PlaceOrder, o, engine.StartOptions{ID: "order:" + o.ID})
		require.NoError(t, err)
		_, err = r.Result(ctx)
		require.ErrorContains(t, err, "card card_declined declined; compensated", "released")
		return r.WorkflowID
	}},
}

func startOnboarding(ctx context.Context, t *testing.T, env *durabletest.Env) string {
	r, err := engine.Start(ctx, env.Engine, onboard.Onboard, onboard.OnboardInput{Email: "ada@example.com", PaymentMethod: "card_4242", Cents: 4900}, engine.StartOptions{ID: "onboard:ada@example.com"})
	require.NoError(t, err)
	_, err = r.Result(ctx)
	require.NoError(t, err)
	return r.WorkflowID
}

// TestReplay replays every recorded history against today's workflow code.
// A change that breaks determinism fails here with the replayer's report.
// Record the histories again (after an intended, compatible change) with
//
//	go test -run TestReplay -update .
func TestReplay(t *testing.T) {
	if *update {
		record(t)
	}
	files, err := filepath.Glob(filepath.Join("testdata", "histories", "*.json"))
	require.NoError(t, err)
	require.NotEmpty(t, files, "no recorded histories: run go test -run TestReplay -update .")

	e, err := engine.New(pgtest.Pool(t), engine.Options{})
	require.NoError(t, err)
	require.NoError(t, register(e))
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			t.Parallel()
			data, err := os.ReadFile(file)
			require.NoError(t, err)
			h, err := history.Import(bytes.NewReader(data))
			require.NoError(t, err)
			require.NoError(t, e.Replay(context.Background(), h))
		})
	}
}

// record runs each scenario and writes its history. Scenarios share the
// examples' package state, so they run one after another.
func record(t *testing.T) {
	for _, sc := range scenarios {
		env := durabletest.New(t, durabletest.Options{Start: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)})
		require.NoError(t, register(env.Engine))
		env.Run()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		id := sc.run(ctx, t, env)
		h, err := env.Engine.ExportHistory(ctx, id)
		cancel()
		require.NoError(t, err)
		var b bytes.Buffer
		require.NoError(t, history.Export(&b, h))
		path := filepath.Join("testdata", "histories", sc.name+".json")
		require.NoError(t, os.WriteFile(path, b.Bytes(), 0o644))
		t.Logf("recorded %s (%d events)", path, len(h.Events))
	}
}

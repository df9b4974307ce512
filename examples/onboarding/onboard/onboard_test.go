package onboard

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/syncbuf"
)

// The stand-in services are package state (Configure), so these subtests
// run one after another.

// steps lists the activities named in the services' output, in order.
func steps(out string) []string {
	var s []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			s = append(s, f[0])
		}
	}
	return s
}

func TestOnboardingWeekUnderTestEnv(t *testing.T) { //nolint:paralleltest // the services are package state
	for _, tt := range []struct {
		name      string
		completed bool
		wantNudge bool
		wantSteps []string
	}{
		{"setup completed", true, false, []string{"ChargeCard", "ProvisionAccount", "SendWelcomeEmail", "HasCompletedSetup"}},
		{"setup not completed", false, true, []string{"ChargeCard", "ProvisionAccount", "SendWelcomeEmail", "HasCompletedSetup", "SendNudgeEmail"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			out := &syncbuf.Buffer{}
			Configure(out, tt.completed)
			env := durabletest.New(t, durabletest.Options{})
			require.NoError(t, Register(env.Engine))
			env.Run()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			start := env.Clock.Now()
			wall := time.Now()
			r, err := engine.Start(ctx, env.Engine, Onboard, OnboardInput{Email: "ada@example.com", PaymentMethod: "card_4242", Cents: 4900}, engine.StartOptions{ID: "onboard:ada"})
			require.NoError(t, err)
			res, err := r.Result(ctx)
			require.NoError(t, err)
			took := time.Since(wall)

			require.Equal(t, tt.wantNudge, res.Nudged)
			require.Regexp(t, `^acct_[0-9a-f]{8}$`, res.AccountID)
			require.Regexp(t, `^pay_[0-9a-f]{8}$`, res.PaymentID)
			require.Equal(t, tt.wantSteps, steps(out.String()))
			require.GreaterOrEqual(t, env.Clock.Now().Sub(start), 7*24*time.Hour, "a week passed on the engine's clock")
			require.Less(t, took, 5*time.Second, "the week is skipped, not waited")
			t.Logf("a simulated week took %s of wall time", took)
		})
	}
}

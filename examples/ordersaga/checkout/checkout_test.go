package checkout

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/durable-go/durable/durabletest"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/internal/syncbuf"
)

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

func TestPlaceOrder(t *testing.T) {
	t.Parallel()
	order := Order{ID: "A-1", SKU: "BOOK-42", Qty: 2, Cents: 4900, Card: "card_4242", Country: "NL"}
	shipRefused, declined := order, order
	shipRefused.Country = NoServiceCountry
	declined.Card = DeclinedCard
	for _, tt := range []struct {
		name      string
		order     Order
		wantSteps []string
		wantErr   string
	}{
		{
			name:      "ships",
			order:     order,
			wantSteps: []string{"ReserveInventory", "ChargePayment", "Ship"},
		},
		{
			name:      "shipping refused: refund, then release",
			order:     shipRefused,
			wantSteps: []string{"ReserveInventory", "ChargePayment", "Ship", "RefundPayment", "ReleaseInventory", "NotifyCustomer"},
			wantErr:   "activity Ship failed after 1 attempt(s) (permanent): carrier does not ship to AQ; compensated",
		},
		{
			name:      "card declined: release only",
			order:     declined,
			wantSteps: []string{"ReserveInventory", "ChargePayment", "ReleaseInventory", "NotifyCustomer"},
			wantErr:   "activity ChargePayment failed after 1 attempt(s) (permanent): card card_declined declined; compensated",
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			out := &syncbuf.Buffer{}
			env := durabletest.New(t, durabletest.Options{})
			require.NoError(t, Register(env.Engine, &Activities{Out: out}))
			env.Run()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			r, err := engine.Start(ctx, env.Engine, PlaceOrder, tt.order, engine.StartOptions{ID: "order:" + tt.order.ID})
			require.NoError(t, err)
			receipt, err := r.Result(ctx)
			require.Equal(t, tt.wantSteps, steps(out.String()))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Regexp(t, `^res_[0-9a-f]{8}$`, receipt.Reservation)
				require.Regexp(t, `^pay_[0-9a-f]{8}$`, receipt.Payment)
				require.Regexp(t, `^trk_[0-9a-f]{8}$`, receipt.Tracking)
				return
			}
			var wfErr *engine.WorkflowError
			require.True(t, errors.As(err, &wfErr), "got %v", err)
			require.Equal(t, tt.wantErr, wfErr.Failure.Message)
			require.Equal(t, "activity", wfErr.Failure.Class, "the saga error wraps the failed step's ActivityError")
		})
	}
}

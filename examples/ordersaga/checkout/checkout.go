// Package checkout is an order saga as a durable workflow: reserve the
// inventory, charge the payment, ship; when a step fails for good, undo the
// steps before it in reverse order (refund the payment, release the
// inventory) and tell the customer.
package checkout

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"sync"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/saga"
	"github.com/durable-go/durable/workflow"
)

// The stand-in services refuse these inputs for good.
const (
	// DeclinedCard is a card the payment provider declines.
	DeclinedCard = "card_declined"
	// NoServiceCountry is a country the carrier does not ship to.
	NoServiceCountry = "AQ"
)

// Order is what the customer placed.
type Order struct {
	ID      string
	SKU     string
	Qty     int
	Cents   int64
	Card    string
	Country string // where to ship
}

// Receipt names what a placed order created.
type Receipt struct {
	Reservation string
	Payment     string
	Tracking    string
}

// PlaceOrder reserves the inventory, charges the payment and ships. When a
// step fails for good, it compensates the steps that succeeded, most recent
// first, tells the customer, and fails with a *saga.Error that names the
// failure and any compensation that failed too.
//
// Each compensation is an activity recorded in history: if the process
// dies while compensating, the run resumes on the next worker, and the
// compensations that completed are not run again.
func PlaceOrder(ctx workflow.Context, o Order) (Receipt, error) {
	var a *Activities
	s := saga.New(saga.Options{})
	fail := func(cause error) (Receipt, error) {
		err := s.Fail(ctx, cause)
		notice := Notice{OrderID: o.ID, Reason: err.Error()}
		if _, nerr := workflow.ExecuteActivity(ctx, a.NotifyCustomer, notice).Get(ctx); nerr != nil {
			return Receipt{}, errors.Join(err, nerr)
		}
		return Receipt{}, err
	}

	res, err := workflow.ExecuteActivity(ctx, a.ReserveInventory, Items{OrderID: o.ID, SKU: o.SKU, Qty: o.Qty}).Get(ctx)
	if err != nil {
		return fail(err)
	}
	saga.AddCompensation(s, a.ReleaseInventory, res)

	pay, err := workflow.ExecuteActivity(ctx, a.ChargePayment, Charge{OrderID: o.ID, Card: o.Card, Cents: o.Cents}).Get(ctx)
	if err != nil {
		return fail(err)
	}
	saga.AddCompensation(s, a.RefundPayment, pay)

	parcel, err := workflow.ExecuteActivity(ctx, a.Ship, Shipment{OrderID: o.ID, SKU: o.SKU, Qty: o.Qty, Country: o.Country}).Get(ctx)
	if err != nil {
		return fail(err)
	}
	return Receipt{Reservation: res.ID, Payment: pay.ID, Tracking: parcel.Tracking}, nil
}

// Items are the items of an order to reserve.
type Items struct {
	OrderID string
	SKU     string
	Qty     int
}

// Reservation holds items in the warehouse.
type Reservation struct {
	ID  string
	SKU string
	Qty int
}

// Charge is a payment to take.
type Charge struct {
	OrderID string
	Card    string
	Cents   int64
}

// Payment is a charge taken.
type Payment struct {
	ID    string
	Cents int64
}

// Refund is a payment given back.
type Refund struct{ ID string }

// Shipment is what to send where.
type Shipment struct {
	OrderID string
	SKU     string
	Qty     int
	Country string
}

// Parcel is a shipment handed to the carrier.
type Parcel struct{ Tracking string }

// Notice tells the customer why their order was canceled.
type Notice struct {
	OrderID string
	Reason  string
}

// Lease is how long an attempt may run, and so how long a claim held by a
// crashed process blocks the step before another process runs it again.
// It is short so that the crash demonstration resumes quickly.
const Lease = 3 * time.Second

// Activities are the order's steps and their compensations, against
// stand-in services: the inventory, the payment provider, the carrier and
// the mailer. Each prints what it does with the idempotency key it would
// pass to the real service, so a repeated attempt could not act twice.
type Activities struct {
	// Out receives what the services do. Default: discarded.
	Out io.Writer
	// CrashAfter, when positive, simulates a crash: once that many
	// compensations have completed in this process, the next step to start
	// calls Exit(3) before doing anything. Since a step starts only after
	// the one before it was recorded, the process dies right after the
	// CrashAfter-th compensation was recorded in history.
	CrashAfter int
	// Exit ends the process. Default os.Exit.
	Exit func(code int)

	mu          sync.Mutex
	compensated int
}

// Register registers the workflow and a's activities on r: the engine that
// runs them, or a replayer (durablecli's replay commands).
func Register(r engine.Registrar, a *Activities) error {
	step := activity.Options{StartToCloseTimeout: Lease}
	// A compensation must not give up easily: retry it for a long time.
	undo := activity.Options{StartToCloseTimeout: Lease, Retry: activity.RetryPolicy{MaximumAttempts: 100, MaximumInterval: time.Minute}}
	return errors.Join(
		engine.RegisterWorkflow(r, PlaceOrder, engine.WorkflowOptions{}),
		engine.RegisterActivity(r, a.ReserveInventory, step),
		engine.RegisterActivity(r, a.ReleaseInventory, undo),
		engine.RegisterActivity(r, a.ChargePayment, step),
		engine.RegisterActivity(r, a.RefundPayment, undo),
		engine.RegisterActivity(r, a.Ship, step),
		engine.RegisterActivity(r, a.NotifyCustomer, undo),
	)
}

// ReserveInventory holds the items in the warehouse.
func (a *Activities) ReserveInventory(ctx context.Context, in Items) (Reservation, error) {
	a.start(ctx)
	r := Reservation{ID: "res_" + shortKey(ctx), SKU: in.SKU, Qty: in.Qty}
	a.say(ctx, "reserved %d x %s as %s", in.Qty, in.SKU, r.ID)
	return r, nil
}

// ReleaseInventory gives reserved items back: the compensation of
// ReserveInventory.
func (a *Activities) ReleaseInventory(ctx context.Context, r Reservation) (struct{}, error) {
	a.start(ctx)
	a.say(ctx, "released %s (%d x %s)", r.ID, r.Qty, r.SKU)
	a.compensationDone()
	return struct{}{}, nil
}

// ChargePayment charges the card. A declined card is a permanent failure.
func (a *Activities) ChargePayment(ctx context.Context, c Charge) (Payment, error) {
	a.start(ctx)
	if c.Card == DeclinedCard {
		a.say(ctx, "card %s declined", c.Card)
		return Payment{}, activity.Permanent(fmt.Errorf("card %s declined", c.Card))
	}
	p := Payment{ID: "pay_" + shortKey(ctx), Cents: c.Cents}
	a.say(ctx, "charged %d cents to %s as %s", c.Cents, c.Card, p.ID)
	return p, nil
}

// RefundPayment gives a payment back: the compensation of ChargePayment.
func (a *Activities) RefundPayment(ctx context.Context, p Payment) (Refund, error) {
	a.start(ctx)
	r := Refund{ID: "ref_" + shortKey(ctx)}
	a.say(ctx, "refunded %d cents of %s as %s", p.Cents, p.ID, r.ID)
	a.compensationDone()
	return r, nil
}

// Ship hands the parcel to the carrier. A country the carrier does not
// serve is a permanent failure: no retry can fix it.
func (a *Activities) Ship(ctx context.Context, s Shipment) (Parcel, error) {
	a.start(ctx)
	if s.Country == NoServiceCountry {
		a.say(ctx, "carrier refused order %s: no service to %s", s.OrderID, s.Country)
		return Parcel{}, activity.Permanent(fmt.Errorf("carrier does not ship to %s", s.Country))
	}
	p := Parcel{Tracking: "trk_" + shortKey(ctx)}
	a.say(ctx, "shipped %d x %s to %s, tracking %s", s.Qty, s.SKU, s.Country, p.Tracking)
	return p, nil
}

// NotifyCustomer tells the customer their order was canceled.
func (a *Activities) NotifyCustomer(ctx context.Context, n Notice) (struct{}, error) {
	a.start(ctx)
	a.say(ctx, "told the customer order %s was canceled", n.OrderID)
	return struct{}{}, nil
}

// start simulates the crash that CrashAfter asks for.
func (a *Activities) start(ctx context.Context) {
	a.mu.Lock()
	crash := a.CrashAfter > 0 && a.compensated >= a.CrashAfter
	a.mu.Unlock()
	if !crash {
		return
	}
	a.mu.Lock()
	if a.Out != nil {
		fmt.Fprintf(a.Out, "CRASH (simulated): exit 3 after %d compensation(s) completed, as %s was about to start\n",
			a.CrashAfter, activity.GetInfo(ctx).Name)
	}
	a.mu.Unlock()
	exit := a.Exit
	if exit == nil {
		exit = os.Exit
	}
	exit(3)
}

func (a *Activities) compensationDone() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.compensated++
}

func (a *Activities) say(ctx context.Context, format string, args ...any) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.Out == nil {
		return
	}
	info := activity.GetInfo(ctx)
	fmt.Fprintf(a.Out, "  %-16s %s  (idempotency key %s, attempt %d)\n", info.Name, fmt.Sprintf(format, args...), info.IdempotencyKey, info.Attempt)
}

// shortKey derives a short, stable ID from the attempt's idempotency key, as
// a real service would return the same ID for the same key.
func shortKey(ctx context.Context) string {
	h := fnv.New32a()
	h.Write([]byte(activity.GetInfo(ctx).IdempotencyKey))
	return fmt.Sprintf("%08x", h.Sum32())
}

// Package onboard is the seed article's onboarding flow as a durable
// workflow: charge the card, provision the account, send the welcome email,
// sleep a week, check that setup was completed, and nudge if not.
package onboard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"sync"
	"time"

	"github.com/durable-go/durable/activity"
	"github.com/durable-go/durable/engine"
	"github.com/durable-go/durable/workflow"
)

// OnboardInput is what a sign-up gives us.
type OnboardInput struct {
	Email         string
	PaymentMethod string
	Cents         int64
	// SetupGrace is how long to wait before checking that the customer
	// finished setting up. Default: a week.
	SetupGrace time.Duration
}

// OnboardResult names what onboarding created.
type OnboardResult struct {
	AccountID string
	PaymentID string
	Nudged    bool
}

// Onboard is the seed article's workflow: linear code that survives crashes,
// deploys and a week of sleep.
func Onboard(ctx workflow.Context, in OnboardInput) (OnboardResult, error) {
	grace := in.SetupGrace
	if grace == 0 {
		grace = 7 * 24 * time.Hour
	}
	payment, err := workflow.ExecuteActivity(ctx, ChargeCard, Charge{Method: in.PaymentMethod, Cents: in.Cents}).Get(ctx)
	if err != nil {
		return OnboardResult{}, err
	}
	account, err := workflow.ExecuteActivity(ctx, ProvisionAccount, in.Email).Get(ctx)
	if err != nil {
		return OnboardResult{}, err
	}
	if _, err := workflow.ExecuteActivity(ctx, SendWelcomeEmail, account).Get(ctx); err != nil {
		return OnboardResult{}, err
	}
	workflow.Logger(ctx).Info("sleeping before the setup check", "for", grace)
	if err := workflow.Sleep(ctx, grace); err != nil { // no worker is blocked meanwhile
		return OnboardResult{}, err
	}
	done, err := workflow.ExecuteActivity(ctx, HasCompletedSetup, account).Get(ctx)
	if err != nil {
		return OnboardResult{}, err
	}
	if !done {
		if _, err := workflow.ExecuteActivity(ctx, SendNudgeEmail, account).Get(ctx); err != nil {
			return OnboardResult{}, err
		}
	}
	return OnboardResult{AccountID: account.ID, PaymentID: payment.ID, Nudged: !done}, nil
}

// Charge is a card charge.
type Charge struct {
	Method string
	Cents  int64
}

// Payment is a completed charge.
type Payment struct{ ID string }

// Account is a provisioned account.
type Account struct {
	ID    string
	Email string
}

// services stands in for the payment provider, the account service and the
// mailer. Each activity prints what it does, with the idempotency key it
// would pass to the real service, so a retried attempt could not act twice.
type services struct {
	mu             sync.Mutex
	out            io.Writer
	setupCompleted bool
}

var svc = &services{out: io.Discard}

// Configure sets where the stand-in services print, and whether the
// customer completes setup during the week.
func Configure(out io.Writer, setupCompleted bool) {
	svc.mu.Lock()
	defer svc.mu.Unlock()
	svc.out, svc.setupCompleted = out, setupCompleted
}

// Register registers the workflow and its activities on r: the engine
// that runs them, or a replayer (durablecli's replay commands).
func Register(r engine.Registrar) error {
	return errors.Join(
		engine.RegisterWorkflow(r, Onboard, engine.WorkflowOptions{}),
		engine.RegisterActivity(r, ChargeCard, activity.Options{Retry: activity.RetryPolicy{MaximumAttempts: 5}}),
		engine.RegisterActivity(r, ProvisionAccount, activity.Options{}),
		engine.RegisterActivity(r, SendWelcomeEmail, activity.Options{}),
		engine.RegisterActivity(r, HasCompletedSetup, activity.Options{}),
		engine.RegisterActivity(r, SendNudgeEmail, activity.Options{}),
	)
}

func (s *services) say(ctx context.Context, format string, args ...any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	info := activity.GetInfo(ctx)
	fmt.Fprintf(s.out, "  %-18s %s  (idempotency key %s, attempt %d)\n", info.Name, fmt.Sprintf(format, args...), info.IdempotencyKey, info.Attempt)
}

// ChargeCard charges the card; the idempotency key makes a retried charge a
// no-op at the provider.
func ChargeCard(ctx context.Context, c Charge) (Payment, error) {
	key := activity.GetInfo(ctx).IdempotencyKey
	svc.say(ctx, "charged %d cents to %s", c.Cents, c.Method)
	return Payment{ID: "pay_" + shortKey(key)}, nil
}

// ProvisionAccount creates the account.
func ProvisionAccount(ctx context.Context, email string) (Account, error) {
	key := activity.GetInfo(ctx).IdempotencyKey
	svc.say(ctx, "created account for %s", email)
	return Account{ID: "acct_" + shortKey(key), Email: email}, nil
}

// SendWelcomeEmail sends the welcome email.
func SendWelcomeEmail(ctx context.Context, a Account) (struct{}, error) {
	svc.say(ctx, "sent welcome email to %s", a.Email)
	return struct{}{}, nil
}

// HasCompletedSetup asks the account service whether setup is done.
func HasCompletedSetup(ctx context.Context, a Account) (bool, error) {
	svc.mu.Lock()
	done := svc.setupCompleted
	svc.mu.Unlock()
	svc.say(ctx, "setup completed by %s: %v", a.ID, done)
	return done, nil
}

// SendNudgeEmail reminds the customer to finish setting up.
func SendNudgeEmail(ctx context.Context, a Account) (struct{}, error) {
	svc.say(ctx, "sent nudge email to %s", a.Email)
	return struct{}{}, nil
}

// shortKey derives a short, stable id from an idempotency key
// ("<run id>:<seq>"), as a real service would return the same id for the
// same key.
func shortKey(key string) string {
	h := fnv.New32a()
	h.Write([]byte(key))
	return fmt.Sprintf("%08x", h.Sum32())
}

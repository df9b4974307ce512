// Package saga undoes the completed steps of a workflow when a later step
// fails, by running compensating activities in reverse order.
//
// A saga is a sequence of local steps with no transaction around them:
// reserve the stock, charge the card, ship. When shipping fails for good,
// the card is refunded and the stock released. A [Saga] is the stack of those
// undo steps, kept in workflow code:
//
//	func PlaceOrder(ctx workflow.Context, o Order) (Receipt, error) {
//		s := saga.New(saga.Options{})
//		res, err := workflow.ExecuteActivity(ctx, Reserve, o).Get(ctx)
//		if err != nil {
//			return Receipt{}, s.Fail(ctx, err)
//		}
//		saga.AddCompensation(s, Release, res)
//		pay, err := workflow.ExecuteActivity(ctx, Charge, o).Get(ctx)
//		if err != nil {
//			return Receipt{}, s.Fail(ctx, err) // releases the stock
//		}
//		saga.AddCompensation(s, Refund, pay)
//		if _, err := workflow.ExecuteActivity(ctx, Ship, o).Get(ctx); err != nil {
//			return Receipt{}, s.Fail(ctx, err) // refunds, then releases
//		}
//		return Receipt{Payment: pay.ID}, nil
//	}
//
// The package is built only on [workflow]: it holds no state outside the
// workflow's own, and needs no registration of its own. The compensations are
// ordinary activities, registered with the engine.
//
// # Durability
//
// Compensations run with [workflow.ExecuteActivity], so each is recorded in
// the run's history. If the worker dies halfway through compensating, another
// worker replays the run: the steps and the compensations that completed
// return their recorded results, and compensating goes on with the first one
// that had not completed. Each compensation completes once. Like any
// activity it runs at least once, so make it idempotent: pass
// activity.GetInfo(ctx).IdempotencyKey to the service it calls.
//
// # Order and failures
//
// By default compensations run one at a time, most recent first, and stop at
// the first one that fails for good (its retries spent, or a permanent
// error): undoing an earlier step may rely on the later one having been
// undone. [Options.ContinueOnError] runs the rest anyway and reports every
// failure; [Options.Parallel] starts them all at once.
//
// [Saga.Fail] returns an *[Error] with the original failure as its Cause and
// the failed compensations; errors.Is and errors.As see both. A compensation
// that fails for good needs a person: give compensations a generous retry
// policy at registration, and when one still fails, the run fails with both
// errors in its message and is kept as a dead letter (see docs/sagas.md and
// docs/dead-letters.md).
package saga

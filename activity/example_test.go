package activity_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/durable-go/durable/activity"
)

func ExampleRetryPolicy_Delay() {
	p := activity.RetryPolicy{} // the defaults: 1s, ×2, at most 1h
	half := func() float64 { return 0.5 }
	for _, attempt := range []int{1, 2, 3, 10, 12, 13, 1000} {
		fmt.Printf("after attempt %d: %v\n", attempt, p.Delay(attempt, half))
	}
	// Output:
	// after attempt 1: 500ms
	// after attempt 2: 1s
	// after attempt 3: 2s
	// after attempt 10: 4m16s
	// after attempt 12: 17m4s
	// after attempt 13: 30m0s
	// after attempt 1000: 30m0s
}

func ExampleRetryPolicy_WithDefaults() {
	p := activity.RetryPolicy{MaximumAttempts: 3}.WithDefaults()
	fmt.Println(p.InitialInterval, p.BackoffCoefficient, p.MaximumInterval, p.MaximumAttempts, p.MaximumRateLimitedRetries)
	// Output:
	// 1s 2 1h0m0s 3 100
}

func ExampleRetryPolicy_Validate() {
	p := activity.RetryPolicy{BackoffCoefficient: 0.5}
	fmt.Println(p.Validate())
	// Output:
	// retry policy: BackoffCoefficient 0.5 is below 1
}

func ExampleOptions_Validate() {
	o := activity.Options{
		Queue:               "payments",
		StartToCloseTimeout: 30 * time.Second,
		Retry:               activity.RetryPolicy{MaximumAttempts: -1},
	}
	fmt.Println(o.Validate())
	// Output:
	// activity options: retry policy: MaximumAttempts -1 is negative (want >= 1, where 1 means no retries, or 0 for the default 10)
}

var errDeclined = errors.New("card declined")

func ExamplePermanent() {
	charge := func(ctx context.Context, cents int) (string, error) {
		if cents > 100_00 {
			return "", activity.Permanent(fmt.Errorf("charge %d cents: %w", cents, errDeclined))
		}
		return "receipt-1", nil
	}

	_, err := charge(context.Background(), 250_00)
	fmt.Println(err)
	fmt.Println(activity.IsPermanent(err), errors.Is(err, errDeclined), activity.ErrorClass(err))
	// Output:
	// charge 25000 cents: card declined
	// true true permanent
}

func ExampleRateLimited() {
	err := activity.RateLimited(errors.New("429 too many requests"), 3*time.Second)
	err = fmt.Errorf("fetch page 4: %w", err)

	after, ok := activity.RetryAfter(err)
	fmt.Println(err)
	fmt.Println(after, ok, activity.ErrorClass(err))
	// Output:
	// fetch page 4: 429 too many requests (retry after 3s)
	// 3s true rate_limited
}

func ExampleErrorClass() {
	_, err := os.Open("/no/such/file")
	err = fmt.Errorf("load config: %w", err)
	fmt.Println(activity.ErrorClass(err))
	fmt.Println(activity.ErrorClass(errors.New("boom")))
	fmt.Println(activity.ErrorClass(activity.Permanent(err)))

	// A policy that never retries a missing file:
	p := activity.RetryPolicy{NonRetryableErrorTypes: []string{"*fs.PathError"}}
	fmt.Println(p.Validate())
	// Output:
	// *fs.PathError
	// *errors.errorString
	// permanent
	// <nil>
}

// crawl is an activity that resumes from the page of its last heartbeat.
func crawl(ctx context.Context, pages int) (int, error) {
	start := 1
	if details := activity.GetInfo(ctx).HeartbeatDetails; details != nil {
		if err := json.Unmarshal(details, &start); err != nil {
			return 0, activity.Permanent(fmt.Errorf("decode heartbeat details: %w", err))
		}
	}
	for page := start; page <= pages; page++ {
		// ... fetch the page ...
		if err := activity.RecordHeartbeat(ctx, page+1); err != nil {
			return 0, err
		}
	}
	return pages - start + 1, nil
}

func ExampleRecordHeartbeat() {
	// A unit test runs the second attempt directly. Outside an engine
	// RecordHeartbeat only checks that the details encode.
	ctx := activity.NewContext(context.Background(), activity.Info{
		Name:             "crawl",
		Attempt:          2,
		HeartbeatDetails: []byte("3"), // the first attempt got as far as page 3
	})
	n, err := crawl(ctx, 4)
	fmt.Println("pages crawled:", n, err)
	// Output:
	// pages crawled: 2 <nil>
}

func ExampleNewContext() {
	// A unit test calls an activity function directly with the Info it needs.
	sendEmail := func(ctx context.Context, to string) (string, error) {
		info := activity.GetInfo(ctx)
		return fmt.Sprintf("sent to %s with key %s on attempt %d", to, info.IdempotencyKey, info.Attempt), nil
	}
	ctx := activity.NewContext(context.Background(), activity.Info{
		Name:           "send-email",
		IdempotencyKey: "run-1/4",
		Attempt:        1,
	})
	out, err := sendEmail(ctx, "ada@example.com")
	fmt.Println(out, err)
	// Output:
	// sent to ada@example.com with key run-1/4 on attempt 1 <nil>
}

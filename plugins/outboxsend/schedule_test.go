package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/identity"
)

// defaultSend is outbox_send with every default, as pipelines/worker.yaml
// runs it when no SP_WEBHOOK_* setting is given.
func defaultSend(t *testing.T) *outboxSend {
	t.Helper()
	enc, _ := identity.DevKeys()
	conf, err := outboxSendSpec().ParseYAML("url: postgres://speculapro_system:x@127.0.0.1:1/speculapro\nencryption_key: "+enc+"\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOutboxSend(conf, service.MockResources(), 4)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = o.Close(context.Background()) })
	return o
}

// The default retry schedule: quick retries for a blip, then daily, about
// three days in all before a delivery fails for good.
func TestDefaultBackoffSchedule(t *testing.T) {
	o := defaultSend(t)
	if o.maxAttempts != 12 {
		t.Fatalf("max_attempts %d, want 12", o.maxAttempts)
	}
	want := []time.Duration{ // nominal wait after attempt 1, 2, …, 11
		5 * time.Minute, 10 * time.Minute, 20 * time.Minute, 40 * time.Minute, 80 * time.Minute, 160 * time.Minute,
		320 * time.Minute, 640 * time.Minute, 1280 * time.Minute, 24 * time.Hour, 24 * time.Hour,
	}
	var nominal, shortest time.Duration
	for i, w := range want {
		attempt := i + 1
		if got := o.policy.Backoff(attempt); got != w {
			t.Errorf("after attempt %d: nominal wait %s, want %s", attempt, got, w)
		}
		for range 50 {
			if d := o.policy.Delay(attempt); d < w*8/10 || d > w {
				t.Fatalf("after attempt %d: wait %s outside 80-100 %% of %s", attempt, d, w)
			}
		}
		nominal += w
		shortest += w * 8 / 10
	}
	// A receiver down for up to three days loses nothing.
	if shortest < 72*time.Hour || nominal > 4*24*time.Hour {
		t.Errorf("a delivery is retried for %s to %s, want at least 3 days and at most 4", shortest, nominal)
	}
	t.Logf("retries span %s to %s", shortest, nominal)
}

func TestSuspendReason(t *testing.T) {
	tests := []struct {
		name        string
		after       int
		afterTime   time.Duration
		inARow      int
		failingFor  time.Duration
		wantReason  string
		wantNothing bool
	}{
		{name: "healthy", after: 20, afterTime: 120 * time.Hour, wantNothing: true},
		{name: "19 failed deliveries, failing 4 days", after: 20, afterTime: 120 * time.Hour, inARow: 19, failingFor: 96 * time.Hour, wantNothing: true},
		{name: "20 failed deliveries", after: 20, afterTime: 120 * time.Hour, inARow: 20, failingFor: 73 * time.Hour, wantReason: "suspended: 20 deliveries failed in a row"},
		{name: "failing 5 days, few deliveries", after: 20, afterTime: 120 * time.Hour, inARow: 2, failingFor: 120 * time.Hour, wantReason: "suspended: every attempt failed for 120h0m0s"},
		{name: "count rule off", after: 0, afterTime: 120 * time.Hour, inARow: 500, failingFor: time.Hour, wantNothing: true},
		{name: "time rule off", after: 20, afterTime: 0, inARow: 1, failingFor: 1000 * time.Hour, wantNothing: true},
	}
	for _, tt := range tests {
		o := &outboxSend{suspendAfter: tt.after, suspendTime: tt.afterTime}
		got := o.suspendReason(tt.inARow, tt.failingFor)
		if tt.wantNothing && got != "" || !tt.wantNothing && got != tt.wantReason {
			t.Errorf("%s: reason %q, want %q", tt.name, got, tt.wantReason)
		}
	}
	if o := defaultSend(t); o.suspendAfter != 20 || o.suspendTime != 120*time.Hour {
		t.Errorf("defaults: suspend_after %d, suspend_after_failing %s; want 20 and 120h", o.suspendAfter, o.suspendTime)
	}
}

// Against PostgreSQL: a failed attempt starts the endpoint's failing time, a
// delivered one clears it, and an endpoint whose every attempt has failed
// for suspend_after_failing is suspended by the next failed attempt.
func TestSuspensionAfterFailingTime(t *testing.T) {
	f := newClaimFixture(t, 100, 4, 16)
	ep := f.endpoint(t, "ws", 3, 10)
	enc, _ := identity.DevKeys()
	conf, err := outboxSendSpec().ParseYAML("url: "+f.db.SystemURL+"\nencryption_key: "+enc+"\nsuspend_after: 0\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	o, err := newOutboxSend(conf, service.MockResources(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer o.Close(context.Background())
	ctx := context.Background()
	endpointState := func() (failing bool, enabled bool, reason string) {
		t.Helper()
		var r *string
		if err := f.conn.QueryRow(ctx, "SELECT failing_since IS NOT NULL, enabled, disabled_reason FROM speculapro.webhook_endpoints WHERE id = $1", ep).Scan(&failing, &enabled, &r); err != nil {
			t.Fatal(err)
		}
		if r != nil {
			reason = *r
		}
		return failing, enabled, reason
	}
	// attempt claims one delivery and records it with the given outcome.
	attempt := func(outcome string) {
		t.Helper()
		batch, _, err := f.in.claim(ctx, outboxWebhook)
		if err != nil || len(batch) == 0 {
			t.Fatalf("claim: %d rows, %v", len(batch), err)
		}
		j, err := jobOf(batch[0])
		if err != nil {
			t.Fatal(err)
		}
		j.outcome = outcome
		if outcome == outcomeRetry {
			j.status, j.errText = 500, "HTTP 500"
		}
		// The rest of the batch goes back, unsent.
		var rest []*job
		for _, m := range batch[1:] {
			r, err := jobOf(m)
			if err != nil {
				t.Fatal(err)
			}
			r.outcome = outcomeReleased
			rest = append(rest, r)
		}
		if err := o.record(ctx, append([]*job{j}, rest...)); err != nil {
			t.Fatal(err)
		}
	}

	attempt(outcomeRetry)
	if failing, enabled, _ := endpointState(); !failing || !enabled {
		t.Fatalf("after a failed attempt: failing %t enabled %t, want failing and enabled", failing, enabled)
	}
	attempt(outcomeDelivered)
	if failing, _, _ := endpointState(); failing {
		t.Fatalf("after a delivered attempt the endpoint still counts as failing")
	}
	attempt(outcomeRetry)
	if _, err := f.conn.Exec(ctx, "UPDATE speculapro.webhook_endpoints SET failing_since = now() - interval '121 hours' WHERE id = $1", ep); err != nil {
		t.Fatal(err)
	}
	attempt(outcomeRetry)
	if _, enabled, reason := endpointState(); enabled || reason != "suspended: every attempt failed for 120h0m0s" {
		t.Fatalf("failing for 121 hours: enabled %t, reason %q; want suspended for failing 120h", enabled, reason)
	}
}

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

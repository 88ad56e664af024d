package outboxsend

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/outbox"
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
	db := dbtest.New(t)
	conn := db.Connect(t, db.SuperuserURL)
	ep := dbtest.SeedWebhookEndpoint(t, conn, "ws", 3, 10)
	enc, _ := identity.DevKeys()
	conf, err := outboxSendSpec().ParseYAML("url: "+db.SystemURL+"\nencryption_key: "+enc+"\nsuspend_after: 0\n", nil)
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
		if err := conn.QueryRow(ctx, "SELECT failing_since IS NOT NULL, enabled, disabled_reason FROM speculapro.webhook_endpoints WHERE id = $1", ep).Scan(&failing, &enabled, &r); err != nil {
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
		batch := claimDue(t, conn, ep)
		j := batch[0]
		j.outcome = outcome
		if outcome == outbox.OutcomeRetry {
			j.status, j.errText = 500, "HTTP 500"
		}
		// The rest of the batch goes back, unsent.
		for _, r := range batch[1:] {
			r.outcome = outbox.OutcomeReleased
		}
		if err := o.record(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}

	attempt(outbox.OutcomeRetry)
	if failing, enabled, _ := endpointState(); !failing || !enabled {
		t.Fatalf("after a failed attempt: failing %t enabled %t, want failing and enabled", failing, enabled)
	}
	attempt(outbox.OutcomeDelivered)
	if failing, _, _ := endpointState(); failing {
		t.Fatalf("after a delivered attempt the endpoint still counts as failing")
	}
	attempt(outbox.OutcomeRetry)
	if _, err := conn.Exec(ctx, "UPDATE speculapro.webhook_endpoints SET failing_since = now() - interval '121 hours' WHERE id = $1", ep); err != nil {
		t.Fatal(err)
	}
	attempt(outbox.OutcomeRetry)
	if _, enabled, reason := endpointState(); enabled || reason != "suspended: every attempt failed for 120h0m0s" {
		t.Fatalf("failing for 121 hours: enabled %t, reason %q; want suspended for failing 120h", enabled, reason)
	}
}

// claimDue claims endpoint ep's due deliveries for this process as
// outbox_claim does (the attempt counted, claimed_by this worker, a lease of
// a minute), oldest first.
func claimDue(t *testing.T, conn *pgx.Conn, ep event.UUID) []*job {
	t.Helper()
	rows, err := conn.Query(context.Background(), `WITH due AS (
    SELECT id, next_attempt_at FROM speculapro.webhook_deliveries
     WHERE endpoint_id = $1 AND status = 'pending' AND next_attempt_at <= now())
UPDATE speculapro.webhook_deliveries d
   SET next_attempt_at = now() + interval '1 minute', attempts = d.attempts + 1, claimed_by = $2
  FROM due WHERE d.id = due.id
RETURNING d.id, d.workspace_id, d.attempts, d.event_type, d.event_id::text, due.next_attempt_at`, ep, outbox.WorkerID())
	if err != nil {
		t.Fatal(err)
	}
	type claimed struct {
		j   *job
		due time.Time
	}
	var got []claimed
	for rows.Next() {
		c := claimed{j: &job{outbox: outbox.Webhook, endpoint: ep}}
		if err := rows.Scan(&c.j.id, &c.j.ws, &c.j.attempt, &c.j.eventType, &c.j.eventID, &c.due); err != nil {
			t.Fatal(err)
		}
		got = append(got, c)
	}
	if err := rows.Err(); err != nil || len(got) == 0 {
		t.Fatalf("claim: %d rows, %v", len(got), err)
	}
	sort.Slice(got, func(a, b int) bool { return got[a].due.Before(got[b].due) })
	jobs := make([]*job, len(got))
	for i, c := range got {
		jobs[i] = c.j
	}
	return jobs
}

package tests

import (
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/webhook"
)

// The delivery proof: deliveries to three endpoints (one answers 500
// to each delivery's first two attempts, one takes two seconds), all
// delivered once each, every signature verifies with its endpoint's secret,
// the retries wait the configured backoff, and a disabled endpoint gets
// nothing. Notifications ride along: email over a real SMTP server (STARTTLS)
// and a chat-style webhook, neither carrying the clear identifier planted in
// the alert's details.
func TestWorkerDeliversSignedWebhooks(t *testing.T) {
	t.Parallel()
	n := 300 // per endpoint
	if fullScale() {
		n = 5000 / 3
	}
	s := newWorkerStack(t)
	rcv := newReceiver(t)
	mailer := newSMTPServer(t)

	type ep struct {
		path   string
		secret string
		keys   []string
	}
	eps := []*ep{{path: "/ok/a"}, {path: "/flaky/b"}, {path: "/slow/c"}}
	for _, e := range eps {
		id, secret := s.addEndpoint(t, rcv.url(e.path))
		e.secret = secret
		e.keys = s.queueDeliveries(t, id, n)
	}
	off, _ := s.addEndpoint(t, rcv.url("/disabled/d"))
	s.cli(t, s.env, "disable", "--workspace", s.ws.String(), "--endpoint", off.String())
	s.queueDeliveries(t, off, 20)

	// Notifications as the stream queues them, with a clear identifier (an
	// IBAN) in the alert's details that must never be sent.
	const clearID = "DE89370400440532013000"
	if _, err := s.conn.Exec(t.Context(), `
INSERT INTO speculapro.notifications (workspace_id, dedupe_key, kind, channel, recipient, payload)
SELECT $1, 'alert.created:' || g || ':' || c.channel, 'alert.created', c.channel, c.recipient,
       jsonb_build_object('type', 'alert.created', 'id', gen_random_uuid(), 'created_at', now(),
                          'alert', jsonb_build_object('id', gen_random_uuid(), 'severity', 'critical',
                                                      'title', 'Mule pattern', 'details', jsonb_build_object('iban', $2::text)))
  FROM generate_series(1, 3) g,
       (VALUES ('email', 'analyst@bank.test'), ('webhook', $3)) AS c(channel, recipient)`,
		s.ws, clearID, rcv.url("/chat/room")); err != nil {
		t.Fatal(err)
	}

	w := startWorker(t, "worker", s.with(map[string]string{"SP_SMTP_URL": mailer.url("mailer", "mailer-pass")}))
	s.waitDone(t, 3*time.Minute)

	if got := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE status = 'delivered'"); got != 3*n {
		t.Errorf("%d deliveries delivered, want %d", got, 3*n)
	}
	if got := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND (status <> 'pending' OR attempts > 0)", off); got != 0 {
		t.Errorf("%d deliveries of the disabled endpoint were attempted", got)
	}
	if got := len(rcv.requests("/disabled/")); got != 0 {
		t.Errorf("the disabled endpoint received %d requests", got)
	}
	if got := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries d JOIN speculapro.webhook_endpoints e ON e.id = d.endpoint_id WHERE e.url LIKE '%/flaky/%' AND (d.attempts <> 3 OR d.response_status <> 200)"); got != 0 {
		t.Errorf("%d flaky deliveries not delivered at their third attempt", got)
	}

	now := time.Now()
	for _, e := range eps {
		got := rcv.requests(e.path)
		byKey := map[string][]received{}
		for _, r := range got {
			byKey[r.key] = append(byKey[r.key], r)
			if err := webhook.Verify(r.header, r.body, e.secret, now, 10*time.Minute); err != nil {
				t.Fatalf("%s: delivery %s: signature %q does not verify: %v", e.path, r.key, r.header.Get(webhook.HeaderSignature), err)
			}
			if r.event != "alert.created" || jsonOf(r.body)["id"] != r.key {
				t.Fatalf("%s: event %q, webhook-id %s for body id %v", e.path, r.event, r.key, jsonOf(r.body)["id"])
			}
		}
		want := 1
		if strings.HasPrefix(e.path, "/flaky/") {
			want = 3
		}
		for _, k := range e.keys {
			if len(byKey[k]) != want {
				t.Fatalf("%s: event %s arrived %d times, want %d", e.path, k, len(byKey[k]), want)
			}
		}
		if want == 3 {
			// Backoff 1 s then 2 s, each at least 80 % (jitter 20 %).
			var gaps1, gaps2 []time.Duration
			for _, k := range e.keys {
				rs := byKey[k]
				gaps1, gaps2 = append(gaps1, rs[1].at.Sub(rs[0].at)), append(gaps2, rs[2].at.Sub(rs[1].at))
			}
			sort.Slice(gaps1, func(i, j int) bool { return gaps1[i] < gaps1[j] })
			sort.Slice(gaps2, func(i, j int) bool { return gaps2[i] < gaps2[j] })
			if gaps1[0] < 800*time.Millisecond || gaps2[0] < 1600*time.Millisecond {
				t.Errorf("retries came early: shortest gaps %s and %s, want at least 0.8 s and 1.6 s", gaps1[0], gaps2[0])
			}
			t.Logf("flaky endpoint: gap before attempt 2 min %s median %s; before attempt 3 min %s median %s",
				gaps1[0], gaps1[len(gaps1)/2], gaps2[0], gaps2[len(gaps2)/2])
		}
	}

	mails := mailer.received()
	if len(mails) != 3 {
		t.Fatalf("%d mails arrived, want 3", len(mails))
	}
	for _, m := range mails {
		if !m.tls || !strings.Contains(m.auth, "PLAIN") || !strings.Contains(m.to, "analyst@bank.test") {
			t.Errorf("mail tls=%t auth=%q to=%q, want STARTTLS, AUTH PLAIN, the recipient", m.tls, m.auth, m.to)
		}
		if !strings.Contains(m.data, "Subject: [SpeculaPro] critical alert: Mule pattern") || !strings.Contains(m.data, "Severity:  critical") {
			t.Errorf("mail lacks the alert's summary:\n%s", m.data)
		}
		if strings.Contains(m.data, clearID) {
			t.Errorf("mail carries the clear identifier:\n%s", m.data)
		}
	}
	chat := rcv.requests("/chat/")
	if len(chat) != 3 {
		t.Fatalf("%d chat notifications arrived, want 3", len(chat))
	}
	for _, c := range chat {
		if strings.Contains(string(c.body), clearID) || !strings.Contains(jsonOf(c.body)["text"].(string), "Mule pattern") {
			t.Errorf("chat notification %s", c.body)
		}
	}
	if got := s.count(t, "SELECT count(*) FROM speculapro.notifications WHERE status = 'sent'"); got != 6 {
		t.Errorf("%d notifications sent, want 6", got)
	}

	scrape, err := w.scrape()
	if err != nil {
		t.Fatal(err)
	}
	if d := metricSum(scrape, "speculapro_worker_deliveries_total", `outbox="webhook"`, `outcome="delivered"`); d != float64(3*n) {
		t.Errorf("deliveries_total{delivered} = %v, want %d\n%s", d, 3*n, metricLines(scrape, "speculapro_worker"))
	}
	if r := metricSum(scrape, "speculapro_worker_deliveries_total", `outbox="webhook"`, `outcome="retry"`); r != float64(2*n) {
		t.Errorf("deliveries_total{retry} = %v, want %d", r, 2*n)
	}
	for _, m := range []string{"speculapro_worker_queue_depth", "speculapro_worker_oldest_pending_seconds", "speculapro_worker_attempt_duration_ns", "speculapro_worker_partitions_covered_until_seconds"} {
		if !strings.Contains(scrape, m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
	w.stop(t)
	if out := w.stdout.String() + w.stderr.String(); strings.Contains(out, clearID) || strings.Contains(out, "analyst@bank.test") {
		t.Errorf("the worker's log carries a clear identifier or recipient")
	}
}

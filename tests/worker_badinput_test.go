package tests

import (
	"regexp"
	"strings"
	"testing"
	"time"
)

// Bad webhook input is refused or bounded, with a clear error: a URL that
// is not one, http:// and loopback in production mode (by the CLI, and by
// the worker for an endpoint stored before), an endpoint that redirects, one
// that answers with a huge body, one that answers 410 Gone, and one that
// keeps failing (suspended).
func TestWorkerBadInput(t *testing.T) {
	t.Parallel()
	t.Run("cli", func(t *testing.T) {
		s := newWorkerStack(t)
		prod := s.with(map[string]string{"SP_WEBHOOK_ALLOW_INSECURE": ""})
		for _, tt := range []struct{ url, want string }{
			{"not a url", "not an absolute http:// or https:// URL with a host"},
			{"https://127.0.0.1:8443/hook", "127.0.0.1 is loopback (127.0.0.0/8): webhooks reach only public (global unicast) addresses"},
			{"https://169.254.169.254/latest/meta-data", "169.254.169.254 is link-local (169.254.0.0/16): webhooks reach only public"},
			{"https://localhost/hook", "a localhost name is loopback"},
			{"http://hooks.example.com/hook", "only https:// webhook URLs are allowed"},
		} {
			_, stderr, code := runBin(t, prod, "webhook", "add", "--workspace", s.ws.String(), "--url", tt.url)
			if code == 0 || !strings.Contains(stderr, tt.want) {
				t.Errorf("webhook add --url %q: exit %d, stderr %q; want a failure saying %q", tt.url, code, stderr, tt.want)
			}
		}
		if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_endpoints"); n != 0 {
			t.Errorf("%d endpoints stored from refused URLs", n)
		}
	})

	t.Run("production worker refuses loopback", func(t *testing.T) {
		s := newWorkerStack(t)
		rcv := newReceiver(t)
		// Stored in local mode, then sent by a production worker.
		ep, _ := s.addEndpoint(t, rcv.url("/ok/internal"))
		s.queueDeliveries(t, ep, 3)
		tlsLoop, _ := s.addEndpoint(t, "https://"+rcv.addr+"/ok/internal-tls")
		s.queueDeliveries(t, tlsLoop, 3)
		w := startWorker(t, "production worker", s.with(map[string]string{"SP_WEBHOOK_ALLOW_INSECURE": ""}))
		s.waitDone(t, waitBound)
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries
 WHERE status = 'failed' AND attempts = 1 AND last_error LIKE '%only https:// webhook URLs are allowed%'`); n != 3 {
			t.Errorf("%d of 3 deliveries to an http:// loopback URL failed at once saying why", n)
		}
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries
 WHERE endpoint_id = $1 AND status = 'failed' AND attempts = 1 AND last_error LIKE '%127.0.0.1 is loopback (127.0.0.0/8)%'`, tlsLoop); n != 3 {
			t.Errorf("%d of 3 deliveries to an https:// loopback URL failed at once saying why", n)
		}
		if got := len(rcv.requests("/")); got != 0 {
			t.Errorf("the loopback receiver got %d requests from a production worker", got)
		}
		w.stop(t)
	})

	t.Run("redirect, huge body, gone, suspension", func(t *testing.T) {
		s := newWorkerStack(t)
		rcv := newReceiver(t)
		redirect, _ := s.addEndpoint(t, rcv.url("/redirect/r"))
		huge, _ := s.addEndpoint(t, rcv.url("/huge/h"))
		gone, _ := s.addEndpoint(t, rcv.url("/gone/g"))
		broken, _ := s.addEndpoint(t, rcv.url("/error/e"))
		s.queueDeliveries(t, redirect, 2)
		s.queueDeliveries(t, huge, 2)
		s.queueDeliveries(t, gone, 2)
		s.queueDeliveries(t, broken, 5)
		w := startWorker(t, "worker", s.with(map[string]string{"SP_WEBHOOK_MAX_ATTEMPTS": "1", "SP_WEBHOOK_SUSPEND_AFTER": "3"}))
		start := time.Now()
		s.waitDone(t, waitBound)
		t.Logf("settled in %s", time.Since(start).Round(time.Millisecond))

		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1
 AND status = 'failed' AND attempts = 1 AND response_status = 302 AND last_error LIKE '%redirect, which is not followed%'`, redirect); n != 2 {
			t.Errorf("%d of 2 redirected deliveries failed at once with the redirect error", n)
		}
		if got := len(rcv.requests("/landing")); got != 0 {
			t.Errorf("the redirect was followed %d times", got)
		}
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1 AND status = 'delivered'`, huge); n != 2 {
			t.Errorf("%d of 2 deliveries answered with a huge 200 delivered", n)
		}
		rcv.mu.Lock()
		sent := rcv.hugeSent
		rcv.mu.Unlock()
		if sent > 64<<20 {
			t.Errorf("the worker let the huge answers stream %d MiB: not bounded", sent>>20)
		}
		t.Logf("huge answers: the receiver got %d KiB out before the worker hung up (of 2 × %d MiB)", sent>>10, rcv.hugeBytes>>20)

		var enabled bool
		var reason string
		if err := s.conn.QueryRow(t.Context(), `SELECT enabled, coalesce(disabled_reason, '') FROM speculapro.webhook_endpoints WHERE id = $1`, gone).Scan(&enabled, &reason); err != nil {
			t.Fatal(err)
		}
		if enabled || !strings.Contains(reason, "410 Gone") {
			t.Errorf("after a 410: enabled=%t reason=%q, want disabled for 410 Gone", enabled, reason)
		}
		if err := s.conn.QueryRow(t.Context(), `SELECT enabled, coalesce(disabled_reason, '') FROM speculapro.webhook_endpoints WHERE id = $1`, broken).Scan(&enabled, &reason); err != nil {
			t.Fatal(err)
		}
		if enabled || reason != "suspended: 3 deliveries failed in a row" {
			t.Errorf("after failures in a row: enabled=%t reason=%q, want suspended", enabled, reason)
		}
		suspendedLine := regexp.MustCompile(`level=WARN msg="worker: endpoint suspended" .*endpoint=` + broken.String())
		waitUntil(t, 10*time.Second, "the suspension's WARN line", func() error {
			if !suspendedLine.MatchString(w.stdout.String() + w.stderr.String()) {
				return errString("no suspension WARN line for " + broken.String())
			}
			return nil
		})
		waitUntil(t, 30*time.Second, "the suspended-endpoints gauge", func() error {
			scrape, err := w.scrape()
			if err == nil && metricSum(scrape, "speculapro_worker_endpoints_suspended") != 1 {
				err = errString(metricLines(scrape, "speculapro_worker_endpoint"))
			}
			return err
		})
		stdout, _, code := runBin(t, s.env, "webhook", "list", "--workspace", s.ws.String())
		if code != 0 || !strings.Contains(stdout, "suspended: 3 deliveries failed in a row") || !strings.Contains(stdout, "gone: the endpoint answered 410 Gone") {
			t.Errorf("webhook list (exit %d) does not say why endpoints are disabled:\n%s", code, stdout)
		}
		w.stop(t)
	})
}

type errString string

func (e errString) Error() string { return "gauge: " + string(e) }

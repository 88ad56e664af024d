package tests

import (
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

// Which targets a webhook may have, as `speculapro webhook add` and the
// worker see it: in production only public addresses (loopback in disguise,
// private, link-local and CGNAT refused at registration, with a reason, and
// nothing stored); SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS opens the listed ranges
// only; the dev switch (SP_WEBHOOK_ALLOW_INSECURE) opens http:// and loopback,
// so a loopback receiver gets its delivery, while a private address stays
// refused by the CLI and by the worker. Nothing here connects anywhere but
// loopback: refused addresses are refused before any connection.
func TestWebhookTargets(t *testing.T) {
	t.Parallel()
	const refusedWhy = "webhooks reach only public (global unicast) addresses"

	// addRefused runs `webhook add` expecting a refusal whose message says
	// refusedWhy and each of says.
	addRefused := func(t *testing.T, s *workerStack, env map[string]string, url string, says ...string) {
		t.Helper()
		stdout, stderr, code := runBin(t, env, "webhook", "add", "--workspace", s.ws.String(), "--url", url)
		if code == 0 {
			t.Errorf("webhook add --url %s was accepted:\n%s", url, stdout)
			return
		}
		for _, want := range append([]string{"webhook add: --url: webhook URL: "}, says...) {
			if !strings.Contains(stderr, want) {
				t.Errorf("webhook add --url %s: exit %d, stderr %q; want it to say %q", url, code, stderr, want)
			}
		}
		if strings.Contains(stdout, "secret=") {
			t.Errorf("webhook add --url %s printed a secret although refused", url)
		}
	}

	t.Run("production refuses disguised loopback and private targets", func(t *testing.T) {
		s := newWorkerStack(t)
		prod := s.with(map[string]string{"SP_WEBHOOK_ALLOW_INSECURE": ""})
		for _, tt := range []struct {
			url  string
			says []string
		}{
			{"https://2130706433/hook", []string{"127.0.0.1 written in a non-standard form", "loopback"}},
			{"https://0x7f.1/hook", []string{"127.0.0.1 written in a non-standard form"}},
			{"https://017700000001/hook", []string{"127.0.0.1 written in a non-standard form"}},
			{"https://127.1/hook", []string{"127.0.0.1 written in a non-standard form"}},
			{"https://0/hook", []string{"0.0.0.0 written in a non-standard form"}},
			{"https://127.0.0.1./hook", []string{"127.0.0.1 written in a non-standard form"}},
			{"https://localhost./hook", []string{"a localhost name is loopback", "SP_WEBHOOK_ALLOW_INSECURE"}},
			{"https://hooks.localhost/hook", []string{"a localhost name is loopback"}},
			{"https://ＬＯＣＡＬＨＯＳＴ/hook", []string{"a localhost name is loopback"}},
			{"https://[::ffff:127.0.0.1]/hook", []string{"IPv4-mapped, carrying 127.0.0.1", "loopback"}},
			{"https://[64:ff9b::a9fe:a9fe]/latest/meta-data", []string{"NAT64, carrying 169.254.169.254", "link-local"}},
			{"https://[2002:a00:1::1]/hook", []string{"6to4, carrying 10.0.0.1", "private-use"}},
			{"https://10.20.0.5/hook", []string{"10.20.0.5 is private-use (10.0.0.0/8)", "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS"}},
			{"https://169.254.169.254/latest/meta-data", []string{"link-local (169.254.0.0/16)"}},
			{"https://100.64.0.1/hook", []string{"shared address space"}},
			{"https://198.18.0.1/hook", []string{"benchmarking"}},
			{"https://[fd00::1]/hook", []string{"unique local (fc00::/7)"}},
			{"https://[2001:db8::1]/hook", []string{"documentation (2001:db8::/32)"}},
		} {
			addRefused(t, s, prod, tt.url, append([]string{refusedWhy}, tt.says...)...)
		}
		if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_endpoints"); n != 0 {
			t.Errorf("%d endpoints stored from refused URLs", n)
		}
	})

	t.Run("private networks open only the ranges listed", func(t *testing.T) {
		s := newWorkerStack(t)
		env := s.with(map[string]string{"SP_WEBHOOK_ALLOW_INSECURE": "", "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "10.20.0.0/16, fd00:20::/48"})
		out := s.cli(t, env, "add", "--workspace", s.ws.String(), "--url", "https://10.20.0.5/hook")
		if _, err := event.ParseUUID(out["endpoint_id"]); err != nil {
			t.Fatalf("webhook add of a listed private range printed %v", out)
		}
		s.cli(t, env, "add", "--workspace", s.ws.String(), "--url", "https://[fd00:20::5]/hook")
		addRefused(t, s, env, "https://10.21.0.5/hook", refusedWhy, "10.21.0.5 is private-use")
		addRefused(t, s, env, "https://192.168.1.10/hook", refusedWhy, "private-use (192.168.0.0/16)")
		addRefused(t, s, env, "https://169.254.169.254/hook", refusedWhy, "link-local")
		addRefused(t, s, env, "https://127.0.0.1/hook", refusedWhy, "loopback")
		addRefused(t, s, env, "http://10.20.0.5/hook", "only https:// webhook URLs are allowed")
		if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_endpoints"); n != 2 {
			t.Errorf("%d endpoints stored, want the 2 in listed ranges", n)
		}

		bad := s.with(map[string]string{"SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS": "0.0.0.0/0"})
		_, stderr, code := runBin(t, bad, "webhook", "add", "--workspace", s.ws.String(), "--url", "https://10.20.0.5/hook")
		if code == 0 || !strings.Contains(stderr, "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS: private network 0.0.0.0/0 overlaps") {
			t.Errorf("webhook add with SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS=0.0.0.0/0: exit %d, stderr %q", code, stderr)
		}
		w := newBinProcess(t).named("worker with a bad private range")
		w.start(t, bad, w.runArgs("pipelines/worker.yaml")...)
		if code := w.waitExit(t, runBound); code == 0 || !strings.Contains(w.stdout.String()+w.stderr.String(), "allow_private_networks: private network 0.0.0.0/0 overlaps") {
			t.Errorf("the worker with SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS=0.0.0.0/0 exited %d:\n%s", code, w.tail(2000))
		}
	})

	t.Run("dev switch: loopback delivered, private refused", func(t *testing.T) {
		s := newWorkerStack(t) // SP_WEBHOOK_ALLOW_INSECURE=true, as `speculapro dev` sets it
		rcv := newReceiver(t)
		literal, _ := s.addEndpoint(t, rcv.url("/ok/literal"))
		_, port, _ := strings.Cut(rcv.addr, ":")
		byName, _ := s.addEndpoint(t, "http://localhost:"+port+"/ok/name")
		addRefused(t, s, s.env, "http://10.20.0.5/hook", refusedWhy, "10.20.0.5 is private-use", "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS")
		addRefused(t, s, s.env, "http://169.254.169.254/latest/meta-data", refusedWhy, "link-local")
		addRefused(t, s, s.env, "http://[fe80::1]/hook", refusedWhy, "link-local")
		if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_endpoints"); n != 2 {
			t.Errorf("%d endpoints stored, want the 2 loopback ones", n)
		}
		// An endpoint in a private range stored behind the CLI's back (by SQL,
		// or before this check existed): the worker refuses it before connecting.
		var private event.UUID
		if err := s.conn.QueryRow(t.Context(), `INSERT INTO speculapro.webhook_endpoints (workspace_id, url, secret_encrypted, event_types)
SELECT workspace_id, 'http://10.20.0.5:9/hook', secret_encrypted, event_types FROM speculapro.webhook_endpoints WHERE id = $1
RETURNING id`, literal).Scan(&private); err != nil {
			t.Fatal(err)
		}
		s.queueDeliveries(t, literal, 3)
		s.queueDeliveries(t, byName, 3)
		s.queueDeliveries(t, private, 2)
		w := startWorker(t, "dev-mode worker", s.env)
		s.waitDone(t, waitBound)
		if got := len(rcv.requests("/ok/literal")); got != 3 {
			t.Errorf("the loopback receiver got %d of 3 deliveries by address", got)
		}
		if got := len(rcv.requests("/ok/name")); got != 3 {
			t.Errorf("the loopback receiver got %d of 3 deliveries by the name localhost", got)
		}
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id IN ($1, $2) AND status = 'delivered'`,
			literal, byName); n != 6 {
			t.Errorf("%d of 6 loopback deliveries delivered", n)
		}
		if n := s.count(t, `SELECT count(*) FROM speculapro.webhook_deliveries WHERE endpoint_id = $1
 AND status = 'failed' AND attempts = 1 AND last_error LIKE '%10.20.0.5 is private-use (10.0.0.0/8)%'`, private); n != 2 {
			t.Errorf("%d of 2 deliveries to a private address failed at once saying why", n)
		}
		w.stop(t)
	})
}

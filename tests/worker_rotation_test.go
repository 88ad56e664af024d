package tests

import (
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/webhook"
)

// After `webhook rotate-secret` deliveries carry two signatures, the new
// secret's then the old one's, while the grace period lasts, and only the
// new one's after it; the old secret stops verifying then.
func TestWorkerSecretRotation(t *testing.T) {
	// Not parallel: the grace period's deliveries must all arrive within its 6 s.
	s := newWorkerStack(t)
	rcv := newReceiver(t)
	ep, oldSecret := s.addEndpoint(t, rcv.url("/ok/rotate"))
	w := startWorker(t, "worker", s.env)

	phase := func(name string, n int) []received {
		t.Helper()
		before := len(rcv.requests("/ok/rotate"))
		s.queueDeliveries(t, ep, n)
		s.waitDone(t, waitBound)
		got := rcv.requests("/ok/rotate")[before:]
		if len(got) != n {
			t.Fatalf("%s: %d deliveries arrived, want %d", name, len(got), n)
		}
		return got
	}
	check := func(name string, got []received, valid, invalid []string) {
		t.Helper()
		for _, r := range got {
			if n := len(webhook.Signatures(r.header.Get(webhook.HeaderSignature))); n != len(valid) {
				t.Fatalf("%s: %d signatures in %q, want %d", name, n, r.header.Get(webhook.HeaderSignature), len(valid))
			}
			for _, sec := range valid {
				if err := webhook.Verify(r.header, r.body, sec, time.Now(), webhook.Tolerance); err != nil {
					t.Fatalf("%s: does not verify with a secret it should: %v", name, err)
				}
			}
			for _, sec := range invalid {
				if err := webhook.Verify(r.header, r.body, sec, time.Now(), webhook.Tolerance); err == nil {
					t.Fatalf("%s: verifies with a secret it should not", name)
				}
			}
		}
	}

	check("before rotation", phase("before rotation", 20), []string{oldSecret}, nil)

	const grace = 6 * time.Second
	out := s.cli(t, s.env, "rotate-secret", "--workspace", s.ws.String(), "--endpoint", ep.String(), "--grace", grace.String())
	newSecret := out["secret"]
	until, err := time.Parse(time.RFC3339, out["previous_secret_valid_until"])
	if err != nil || newSecret == "" || newSecret == oldSecret {
		t.Fatalf("rotate-secret printed %v", out)
	}
	during := phase("during the grace period", 20)
	if last := during[len(during)-1].at; !last.Before(until) {
		t.Fatalf("the grace-period phase ended at %s, after the grace period (%s): make the grace longer", last, until)
	}
	check("during the grace period", during, []string{newSecret, oldSecret}, nil)

	time.Sleep(time.Until(until) + time.Second)
	check("after the grace period", phase("after the grace period", 20), []string{newSecret}, []string{oldSecret})
	w.stop(t)
}

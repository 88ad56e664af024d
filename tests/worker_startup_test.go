package tests

import (
	"testing"
)

// A worker connected as speculapro_app would be blocked by row-level
// security on every claim: it must refuse to start with the documented line,
// before it sends anything.
func TestWorkerRefusesToStartAsAppRole(t *testing.T) {
	t.Parallel()
	s := newWorkerStack(t)
	rcv := newReceiver(t)
	ep, _ := s.addEndpoint(t, rcv.url("/ok/refused"))
	s.queueDeliveries(t, ep, 5)
	w := startWorker(t, "worker as speculapro_app", s.with(map[string]string{"SP_DB_SYSTEM_URL": s.db.AppURL}))
	requireRoleRefusal(t, w)
	if got := len(rcv.requests("/")); got != 0 {
		t.Errorf("a refused worker sent %d requests", got)
	}
	if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries WHERE attempts > 0"); n != 0 {
		t.Errorf("a refused worker claimed %d rows", n)
	}
}

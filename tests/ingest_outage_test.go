package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// TestIngestKafkaOutage: with Kafka stopped, every item is answered retry
// within about 10 seconds and none is accepted; with Kafka back, a resend
// is accepted and stored once. The shared broker must not be stopped, so
// "Kafka" here is a real broker of the test's own (testenv.PrivateKafka),
// stopped and started again on the same ports and data.
func TestIngestKafkaOutage(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t)
	ws, key := ingestWorkspace(t, db.AppURL)
	prefix := "sp."
	broker := privateKafkaWithTopics(t, prefix)

	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	p := newBinProcess(t)
	p.start(t, ingestEnv(broker.Brokers(), prefix, "outage-persist", db, addr), ingestStreamsArgs...)
	ingestWaitReady(t, p, base)
	client := &http.Client{Timeout: 60 * time.Second}
	conn := db.Connect(t, db.SuperuserURL)
	count := `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`

	at := persistBase.Add(time.Minute)
	before := make([]map[string]any, 20)
	for i := range before {
		before[i] = ingestTxn(i, at)
	}
	if _, ans := ingestPost(t, client, base, key, "/v1/transactions", ingestBody(t, before...)); ans.Accepted != len(before) {
		t.Fatalf("with Kafka up: %+v", ans)
	}
	if got := waitCount(t, conn, len(before), count, ws); got != len(before) {
		t.Fatalf("stored %d of %d before the outage", got, len(before))
	}

	broker.Stop()
	during := make([]map[string]any, 30)
	for i := range during {
		during[i] = ingestTxn(1000+i, at)
	}
	start := time.Now()
	code, ans := ingestPost(t, client, base, key, "/v1/transactions", ingestBody(t, during...))
	took := time.Since(start)
	if code != http.StatusOK || ans.Retry != len(during) || ans.Accepted != 0 || ans.Duplicate != 0 {
		t.Fatalf("with Kafka down (answered after %v): %d accepted %d retry %d duplicate %d %s", took, code, ans.Accepted, ans.Retry, ans.Duplicate, ans.Error)
	}
	// "Within about 10 seconds": the output's 10 s timeout answers, the
	// input's 15 s ack_timeout is only the safety net.
	if took > 16*time.Second {
		t.Errorf("retry answered after %v, want about 10s", took)
	}
	t.Logf("Kafka down: %d items answered retry after %v (%q)", ans.Retry, took.Round(time.Millisecond), ans.Results[0].Message)
	if resp, err := http.Get(base + "/readyz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Errorf("readyz with Kafka down = %d, want 503", resp.StatusCode)
		}
	}

	broker.Start()
	ingestWaitReady(t, p, base)
	// The producer reconnects on its own; the first resend may still race
	// it, so resend (bounded) until nothing is answered retry, as a client
	// would after a retry.
	var resent ingestAnswer
	for attempt := 0; attempt < 5; attempt++ {
		_, resent = ingestPost(t, client, base, key, "/v1/transactions", ingestBody(t, during...))
		if resent.Retry == 0 {
			break
		}
		t.Logf("resend %d: %d retry", attempt+1, resent.Retry)
	}
	if resent.Accepted+resent.Duplicate != len(during) || resent.Retry != 0 {
		t.Fatalf("resend with Kafka back: %d accepted %d duplicate %d retry", resent.Accepted, resent.Duplicate, resent.Retry)
	}
	want := len(before) + len(during)
	if got := waitCount(t, conn, want, count, ws); got != want {
		t.Fatalf("stored %d, want %d", got, want)
	}
	time.Sleep(2 * time.Second)
	if got := persistCount(t, conn, count, ws); got != want {
		t.Errorf("stored %d after settling, want each once: %d", got, want)
	}

	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

package tests

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/internal/event"
)

// SIGTERM while a batch keeps failing (a grant is missing): the retry line is
// logged, the process exits cleanly, the shutdown is counted neither as a
// fault nor as a retry, and the batch is not committed (it is read again).
func TestPersistShutdownWhileBatchKeepsFailing(t *testing.T) {
	t.Parallel()
	db, k, conn, ws := newPersistFixture(t)
	owner := db.Connect(t, db.OwnerURL)
	if _, err := owner.Exec(context.Background(), "REVOKE INSERT ON speculapro.transactions FROM speculapro_system"); err != nil {
		t.Fatal(err)
	}
	var recs []*kgo.Record
	for n := range 10 {
		key, val, _ := persistTxn(t, ws, n, func(e *event.Envelope) { e.AccountExternalID = "acc-1" }) // one partition
		recs = append(recs, &kgo.Record{Key: []byte(key), Value: val})
	}
	k.produceTo(t, "txn.ingested", recs...)

	p := newBinProcess(t)
	p.start(t, persistEnv(k, db.SystemURL), "streams", "-o", "config/observability.yaml", "pipelines/persist.yaml")

	retryLine := persistLogLine("ERROR", "persist: batch failed, retrying")
	if !poll(waitBound, 100*time.Millisecond, func() bool { return len(retryLine.FindAllString(p.stdout.String(), -1)) >= 4 }) {
		t.Fatalf("no retry lines logged")
	}
	line := retryLine.FindString(p.stdout.String())
	// The documented line: rows, err and backoff right after msg, in that order.
	if !regexp.MustCompile(`msg="persist: batch failed, retrying" rows=10 err="[^"]*permission denied[^"]*" backoff=\S+`).MatchString(line) {
		t.Errorf("retry line does not read as documented: %s", line)
	}

	// Scrape until the HTTP server goes away: the engine stops the stream
	// before it, so the last scrape sees the counts after the shutdown. A
	// scrape just before the signal stands in when the process is gone
	// before the first one after it (it can exit within a few ms).
	var last string
	if !poll(waitBound, 20*time.Millisecond, func() bool {
		s, err := p.scrape()
		last = s
		return err == nil
	}) {
		t.Fatal("no /metrics scrape succeeded before SIGTERM")
	}
	atSignal := len(retryLine.FindAllString(p.stdout.String(), -1))
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	for {
		s, err := p.scrape()
		if err != nil {
			break
		}
		last = s
		select {
		case <-p.exited:
		case <-time.After(20 * time.Millisecond):
			continue
		}
		break
	}
	code := p.waitExit(t, exitBound)
	tookToExit := time.Since(stopped)
	t.Logf("exited %s after SIGTERM", tookToExit.Round(time.Millisecond))
	// The backoff is cancelled at once: the engine's graceful stop (15 s)
	// never has to cut the batch off.
	if tookToExit > 5*time.Second {
		t.Errorf("exited %s after SIGTERM: the failing batch's backoff was waited out", tookToExit.Round(time.Millisecond))
	}
	if code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
	if last == "" {
		t.Fatal("no /metrics scrape succeeded")
	}
	logged := float64(len(retryLine.FindAllString(p.stdout.String(), -1)))
	if after := int(logged) - atSignal; after > 1 {
		t.Errorf("%d retries logged after SIGTERM: the backoff went on", after)
	}
	faults := metricSum(last, "speculapro_persist_faults_total")
	retries := metricSum(last, "speculapro_persist_retries_total")
	if faults != 1 {
		t.Errorf("speculapro_persist_faults_total = %v, want 1: one failing batch, and the shutdown is not a fault", faults)
	}
	// Every retry is a backoff that started and was logged; the last scrape
	// can miss at most the final one.
	if retries > logged || logged-retries > 1 {
		t.Errorf("speculapro_persist_retries_total = %v with %v retry lines logged", retries, logged)
	}
	// (The engine itself logs the cancelled write as "Failed to send
	// message"; the persister's own lines must not report it, and nothing
	// is retried after the signal.)
	for _, line := range strings.Split(p.stdout.String(), "\n") {
		if strings.Contains(line, `msg="persist:`) && (strings.Contains(line, "context canceled") || strings.Contains(line, "shutting down")) {
			t.Errorf("the shutdown was reported as a persist failure: %s", line)
		}
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "timed out") {
			t.Errorf("the shutdown was cut off: %s", line)
		}
	}
	if n := persistCount(t, conn, "SELECT count(*) FROM speculapro.transactions"); n != 0 {
		t.Errorf("%d transactions stored without INSERT permission", n)
	}
	if n := k.committedOffsets(t, k.group); n != 0 {
		t.Errorf("the failing batch was committed (offsets sum %d)", n)
	}
}

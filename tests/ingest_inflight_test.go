package tests

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// inFlightRSSBound is the documented bound of the ingest process's peak RSS
// under any number of concurrent requests with the default
// max_in_flight_bytes (32 MiB of bodies in flight).
const inFlightRSSBound = 500 << 20

// TestIngestInFlightLimit: concurrent 5 MiB requests
// (300 under make chaos, 100 under make test) against a broker that stopped
// answering (a private one, SIGSTOPped). Requests beyond the key's share of
// the in-flight budget are answered 429, beyond the budget 503, with
// Retry-After; the admitted ones retry
// after the ack timeout; the process's peak RSS stays under
// inFlightRSSBound (without the limit, 128 such requests take it to 977 MB);
// once the broker answers again an item is accepted.
func TestIngestInFlightLimit(t *testing.T) {
	// Not parallel: a hundred 5 MiB requests at once would starve the other tests of CPU.
	concurrent := 100
	if fullScale() {
		concurrent = 300
	}
	prefix := uniqueName(t, "inflight") + "."
	broker := privateKafkaWithTopics(t, prefix)

	db := dbtest.New(t)
	_, key := ingestWorkspace(t, db.AppURL)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	env := ingestEnv(broker.Brokers(), prefix, "unused", db, addr)
	env["SP_REDIS_KEY_PREFIX"] = prefix
	env["SP_INGEST_IDEMPOTENCY_TTL"] = "10m" // the test's keys leave the shared Redis soon
	p := newBinProcess(t).named("ingest")
	p.start(t, env, p.runArgs("pipelines/ingest.yaml")...)
	ingestWaitReady(t, p, base)
	idle := p.peakRSS(t)

	// 1,000 items of about 5 KiB each: just under the 5 MiB body limit.
	at := time.Now().UTC().Add(-time.Hour)
	pad := strings.Repeat("x", 4800)
	items := make([]map[string]any, 1000)
	for i := range items {
		items[i] = ingestTxn(i, at)
		items[i]["metadata"] = map[string]any{"pad": pad}
	}
	body, err := json.Marshal(map[string]any{"items": items})
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 5<<20 || len(body) < 4<<20 {
		t.Fatalf("body of %d bytes, want just under 5 MiB", len(body))
	}

	broker.Pause()
	defer broker.Resume()
	var mu sync.Mutex
	codes := map[string]int{}
	var wg sync.WaitGroup
	start := time.Now()
	for range concurrent {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/transactions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
			outcome := ""
			switch {
			case err != nil:
				outcome = "transport error"
			default:
				raw, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				outcome = fmt.Sprint(resp.StatusCode)
				if (resp.StatusCode == http.StatusServiceUnavailable || resp.StatusCode == http.StatusTooManyRequests) && resp.Header.Get("Retry-After") == "" {
					outcome = outcome + " without Retry-After"
				}
				if resp.StatusCode == http.StatusOK && !bytes.Contains(raw, []byte(`"retry":1000`)) {
					outcome = "200 not all retry"
				}
			}
			mu.Lock()
			codes[outcome]++
			mu.Unlock()
		}()
	}
	wg.Wait()
	peak := p.peakRSS(t)
	t.Logf("%d concurrent %d-byte requests against a stopped broker in %v: %v; peak RSS %d MB (idle %d MB, bound %d MB)",
		concurrent, len(body), time.Since(start).Round(time.Second), codes, peak>>20, idle>>20, inFlightRSSBound>>20)
	// One key's requests: beyond its share 429, beyond the whole budget 503.
	if codes["503"]+codes["429"] == 0 || codes["200"] == 0 {
		t.Errorf("answers %v: want some admitted (200, every item retry) and the rest 429 or 503", codes)
	}
	for outcome, n := range codes {
		if outcome != "503" && outcome != "429" && outcome != "200" {
			t.Errorf("%d requests: %s", n, outcome)
		}
	}
	if peak > inFlightRSSBound {
		t.Errorf("peak RSS %d MB, over the documented bound of %d MB", peak>>20, inFlightRSSBound>>20)
	}
	if !p.running() {
		t.Fatal("the ingest process died")
	}

	broker.Resume()
	waitUntil(t, 90*time.Second, "an item to be accepted once the broker answers again", func() error {
		_, ans := ingestPost(t, &http.Client{Timeout: time.Minute}, base, key, "/v1/transactions", ingestBody(t, ingestTxn(5000, at)))
		if ans.Accepted+ans.Duplicate != 1 {
			return fmt.Errorf("answered %+v", ans.Results)
		}
		return nil
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

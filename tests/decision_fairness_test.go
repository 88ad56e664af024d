package tests

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
)

// decisionStatuses sends n decisions of run at rate a second with key, each
// at its scheduled time, and returns the latencies (from the scheduled
// time), the statuses and the degraded answers by reason.
func decisionStatuses(base, key, run string, n int, rate float64) (lat []time.Duration, codes map[int]int, degraded map[string]int) {
	codes, degraded = map[int]int{}, map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		at := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(at))
		body, _ := json.Marshal(decisionTxn(run, i, time.Now().UTC()))
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, a, err := postDecision(base, key, body)
			l := time.Since(at)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, l)
			if err != nil {
				code = 0
			}
			codes[code]++
			if a.Degraded {
				degraded[a.Reason]++
			}
		}()
	}
	wg.Wait()
	return lat, codes, degraded
}

// pausedBody is a request body that arrives hold after its headers: the
// request holds its workspace's slot while the server waits for it, as a
// client on a slow link does.
type pausedBody struct {
	rest []byte
	hold time.Duration
}

func (b *pausedBody) Read(p []byte) (int, error) {
	if b.hold > 0 {
		time.Sleep(b.hold)
		b.hold = 0
	}
	if len(b.rest) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.rest)
	b.rest = b.rest[n:]
	return n, nil
}

// decisionFlood is clients clients each sending decisions back to back
// with key, ignoring Retry-After, until stop or max requests in all; each
// body arrives hold after its headers. It records every status.
func decisionFlood(base, key string, clients, maxRequests int, hold time.Duration, stop <-chan struct{}) map[int]int {
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
	codes := map[int]int{}
	var mu sync.Mutex
	sent := 0
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		// Each flooder ends at stop or once maxRequests are sent in all.
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				mu.Lock()
				if sent >= maxRequests {
					mu.Unlock()
					return
				}
				sent++
				mu.Unlock()
				body, _ := json.Marshal(decisionTxn(fmt.Sprintf("flood-%d", c), i, time.Now().UTC()))
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/decisions", &pausedBody{rest: body, hold: hold})
				req.ContentLength = int64(len(body))
				req.Header.Set("Authorization", "Bearer "+key)
				req.Header.Set("Content-Type", "application/json")
				code := 0
				if resp, err := client.Do(req); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					code = resp.StatusCode
				}
				mu.Lock()
				codes[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return codes
}

// TestDecisionFloodCannotStarveOthers: one workspace floods the decision
// API from 300 clients sending back to back (ignoring Retry-After), each
// body arriving 300 ms after its headers, while a second workspace sends 50
// decisions a second. The flooding workspace is
// answered 429 beyond its share; the steady one is never answered 429 or
// 503 and none of its decisions is degraded. Its p99 alone and beside the
// flood are logged.
func TestDecisionFloodCannotStarveOthers(t *testing.T) {
	// Not parallel: it floods the API from 300 clients, and the steady workspace's decisions must not be degraded.
	s := newDecisionStack(t, "decision-fair", testenv.KafkaBrokers(t), testenv.RedisURL(t), "")
	_, steadyKey := ingestWorkspace(t, s.db.AppURL)
	// A share of 8 requests (0.03125 of 256), each held 300 ms by its late
	// body: the flood's requests beyond the share wait longer than the
	// share wait (half the 250 ms timeout) however fast this machine
	// answers, so the refusal is seen on a quiet machine as on a busy one.
	// Bodies sent at once can all be answered within the wait on a quiet
	// machine, and then no request is ever refused.
	s.startDecision(t, "decision", map[string]string{"SP_DECISION_WORKSPACE_SHARE": "0.03125"})
	base := "http://" + s.addr

	const rate, n = 50.0, 250 // 5 s
	const floodClients = 300
	decisionStatuses(base, steadyKey, "warm", 50, rate)
	alone, codesAlone, degradedAlone := decisionStatuses(base, steadyKey, "alone", n, rate)

	stop := make(chan struct{})
	flood := make(chan map[int]int, 1)
	go func() { flood <- decisionFlood(base, s.key, floodClients, 200_000, 300*time.Millisecond, stop) }()
	time.Sleep(2 * time.Second) // the flood is at full strength first
	beside, codes, degraded := decisionStatuses(base, steadyKey, "beside", n, rate)
	close(stop)
	var floodCodes map[int]int
	select {
	case floodCodes = <-flood:
	case <-time.After(30 * time.Second):
		t.Fatal("the flood did not stop within 30 s")
	}

	p99Alone, p99Beside := quantileOf(alone, 0.99), quantileOf(beside, 0.99)
	t.Logf("steady workspace at %v/s: alone p50 %v p99 %v %v (degraded %v); beside the flood p50 %v p99 %v %v (degraded %v); p99 ratio %.2f",
		rate, quantileOf(alone, 0.5), p99Alone, codesAlone, degradedAlone, quantileOf(beside, 0.5), p99Beside, codes, degraded,
		float64(p99Beside)/float64(max(p99Alone, time.Millisecond)))
	t.Logf("flooding workspace: answers by status %v", floodCodes)

	if codesAlone[http.StatusOK] != n || len(degradedAlone) > 0 {
		t.Fatalf("alone: answers %v, degraded %v", codesAlone, degradedAlone)
	}
	if codes[http.StatusOK] != n {
		t.Errorf("beside the flood the steady workspace was answered %v, want 200 to all %d", codes, n)
	}
	if len(degraded) > 0 {
		t.Errorf("beside the flood the steady workspace's decisions were degraded: %v", degraded)
	}
	if floodCodes[http.StatusTooManyRequests] == 0 {
		t.Errorf("the flooding workspace was never answered 429: %v", floodCodes)
	}
}

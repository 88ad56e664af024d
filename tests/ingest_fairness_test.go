package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// slowBodyAttack is a hostile client: conns connections at once, each
// announcing a body of announce bytes and sending one byte a second; a
// connection that is answered or cut off is opened again, until stop. It
// records every answer's status (0: cut off without one).
type slowBodyAttack struct {
	mu      sync.Mutex
	answers map[int]int
	dials   int
}

func (a *slowBodyAttack) run(addr, key string, conns int, announce int64, stop <-chan struct{}, maxDials int) {
	var wg sync.WaitGroup
	for range conns {
		wg.Add(1)
		// Each attacker ends at stop or after maxDials connections in all.
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				a.mu.Lock()
				if a.dials >= maxDials {
					a.mu.Unlock()
					return
				}
				a.dials++
				a.mu.Unlock()
				code := slowBody(addr, key, announce, stop)
				a.mu.Lock()
				a.answers[code]++
				a.mu.Unlock()
				if code < 0 {
					time.Sleep(100 * time.Millisecond) // could not connect; do not spin
				}
			}
		}()
	}
	wg.Wait()
}

// slowBody sends one request that announces announce bytes and trickles a
// byte a second, and returns the status it was answered (0: none, -1: no
// connection).
func slowBody(addr, key string, announce int64, stop <-chan struct{}) int {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return -1
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/transactions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", key, announce)
	answered := make(chan int, 1)
	// The reader ends when the connection is answered or closed (the
	// deferred Close at the latest).
	go func() {
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			answered <- 0
			return
		}
		resp.Body.Close()
		answered <- resp.StatusCode
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case code := <-answered:
			return code
		case <-stop:
			return 0
		case <-tick.C:
			if _, err := conn.Write([]byte("{")); err != nil {
				select {
				case code := <-answered:
					return code
				case <-time.After(2 * time.Second):
					return 0
				}
			}
		}
	}
}

// steadyIngest sends requests of items transactions each, rate a second for
// d, each at its scheduled time, numbering items from *next; it returns the
// latencies (from the scheduled time), the statuses and the items accepted.
func steadyIngest(base, key string, rate float64, d time.Duration, items int, next *int, at time.Time) (lat []time.Duration, codes map[int]int, accepted int) {
	client := &http.Client{Timeout: time.Minute}
	codes = map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	n := int(rate * d.Seconds())
	for i := range n {
		sched := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(sched))
		batch := make([]map[string]any, items)
		for j := range batch {
			batch[j] = ingestTxn(*next, at)
			batch[j]["external_id"] = fmt.Sprintf("steady-%06d", *next)
			*next++
		}
		body, _ := json.Marshal(map[string]any{"items": batch})
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest(http.MethodPost, base+"/v1/transactions", bytes.NewReader(body))
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", "application/json")
			var ans ingestCounts
			code := 0
			resp, err := client.Do(req)
			if err == nil {
				code = resp.StatusCode
				_ = json.NewDecoder(resp.Body).Decode(&ans)
				resp.Body.Close()
			}
			l := time.Since(sched)
			mu.Lock()
			defer mu.Unlock()
			lat = append(lat, l)
			codes[code]++
			accepted += ans.Accepted
		}()
	}
	wg.Wait()
	return lat, codes, accepted
}

// TestIngestSlowTenantCannotStarveOthers: a hostile workspace keeps eight
// connections open that announce 4 MiB bodies (together the whole 32 MiB
// in-flight budget) and send a byte a second, while a well-behaved workspace
// sends 20-item batches at a steady 10 a second. The well-behaved workspace
// is never answered 503 or 429, every one of its items is accepted and
// stored; the hostile one is answered 429 (over its share), 408 (below the
// minimum rate) or 503, never 200. The well-behaved p99 alone and under
// attack are logged.
func TestIngestSlowTenantCannotStarveOthers(t *testing.T) {
	// Not parallel: it holds the whole in-flight budget and measures the well-behaved workspace beside it.
	k := newPersistKafka(t)
	db := dbtest.New(t)
	_, hostileKey := ingestWorkspace(t, db.AppURL)
	ws, key := ingestWorkspace(t, db.AppURL)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	p := newBinProcess(t)
	p.start(t, ingestEnv(k.brokers, k.prefix, k.group, db, addr), ingestStreamsArgs...)
	ingestWaitReady(t, p, base)

	const rate, items = 10.0, 20
	at := persistBase
	next := 0
	// Warm up (key lookup, connections), then the tenant alone.
	steadyIngest(base, key, rate, time.Second, items, &next, at)
	alone, codesAlone, acceptedAlone := steadyIngest(base, key, rate, 10*time.Second, items, &next, at)

	attack := &slowBodyAttack{answers: map[int]int{}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		attack.run(addr, hostileKey, 8, 4<<20, stop, 200)
	}()
	time.Sleep(2 * time.Second) // the hostile bodies are in flight first
	attacked, codes, accepted := steadyIngest(base, key, rate, 10*time.Second, items, &next, at)
	close(stop)
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the attackers did not stop within 30 s")
	}

	p99Alone, p99Attacked := quantileOf(alone, 0.99), quantileOf(attacked, 0.99)
	t.Logf("well-behaved workspace, %v requests/s of %d items: alone p50 %v p99 %v %v; under attack p50 %v p99 %v %v; p99 ratio %.2f",
		rate, items, quantileOf(alone, 0.5), p99Alone, codesAlone, quantileOf(attacked, 0.5), p99Attacked, codes,
		float64(p99Attacked)/float64(max(p99Alone, time.Millisecond)))
	attack.mu.Lock()
	t.Logf("hostile workspace: %d connections, answers by status %v (0: cut off without an answer)", attack.dials, attack.answers)
	hostile := attack.answers
	attack.mu.Unlock()

	if codesAlone[http.StatusOK] != len(alone) || acceptedAlone != len(alone)*items {
		t.Fatalf("alone: answers %v, %d items accepted of %d", codesAlone, acceptedAlone, len(alone)*items)
	}
	if codes[http.StatusOK] != len(attacked) {
		t.Errorf("under attack the well-behaved workspace was answered %v, want 200 to all %d requests", codes, len(attacked))
	}
	if accepted != len(attacked)*items {
		t.Errorf("under attack %d items accepted of %d", accepted, len(attacked)*items)
	}
	if hostile[http.StatusOK] > 0 {
		t.Errorf("a trickling hostile body was answered 200")
	}
	if hostile[http.StatusTooManyRequests]+hostile[http.StatusRequestTimeout]+hostile[http.StatusServiceUnavailable] == 0 {
		t.Errorf("the hostile workspace was never refused: %v", hostile)
	}

	// Every accepted item of the well-behaved workspace is stored.
	super := db.Connect(t, db.SuperuserURL)
	want := acceptedAlone + accepted + items*int(rate) // the warm-up's too
	waitUntil(t, 2*time.Minute, fmt.Sprintf("%d transactions of the well-behaved workspace stored", want), func() error {
		var n int
		if err := super.QueryRow(context.Background(), `SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1`, ws).Scan(&n); err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("%d stored", n)
		}
		return nil
	})
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

// ingestFlood is clients clients each sending batches of items
// transactions back to back with key, ignoring Retry-After, until stop or
// maxRequests in all; it returns the statuses.
func ingestFlood(base, key string, clients, items, maxRequests int, at time.Time, stop <-chan struct{}) map[int]int {
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: clients}}
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
				batch := make([]map[string]any, items)
				for j := range batch {
					batch[j] = ingestTxn(j, at)
					batch[j]["external_id"] = fmt.Sprintf("flood-%d-%d-%d", c, i, j)
				}
				body, _ := json.Marshal(map[string]any{"items": batch})
				req, _ := http.NewRequest(http.MethodPost, base+"/v1/transactions", bytes.NewReader(body))
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

// TestIngestFloodCannotStarveOthers: a workspace floods the ingest API from
// 24 clients sending 200-item batches back to back (four times the requests
// worked on at once) while another sends 20-item batches at a steady 10 a
// second. The steady workspace is never answered 429 or 503 and every one of
// its items is accepted: waiting workspaces take turns, so it waits for one
// turn rather than behind the whole flood. Its p99 alone and beside the
// flood are logged.
func TestIngestFloodCannotStarveOthers(t *testing.T) {
	// Not parallel: it floods the API from 24 clients and measures the steady workspace beside it.
	k := newPersistKafka(t)
	db := dbtest.New(t)
	_, floodKey := ingestWorkspace(t, db.AppURL)
	_, key := ingestWorkspace(t, db.AppURL)
	addr := testenv.FreeAddr(t)
	base := "http://" + addr
	p := newBinProcess(t)
	p.start(t, ingestEnv(k.brokers, k.prefix, k.group, db, addr), p.runArgs("pipelines/ingest.yaml")...)
	ingestWaitReady(t, p, base)

	const rate, items = 10.0, 20
	at := persistBase
	next := 0
	steadyIngest(base, key, rate, time.Second, items, &next, at)
	alone, codesAlone, acceptedAlone := steadyIngest(base, key, rate, 8*time.Second, items, &next, at)

	stop := make(chan struct{})
	flood := make(chan map[int]int, 1)
	go func() { flood <- ingestFlood(base, floodKey, 24, 200, 5000, at, stop) }()
	time.Sleep(2 * time.Second)
	beside, codes, accepted := steadyIngest(base, key, rate, 8*time.Second, items, &next, at)
	close(stop)
	var floodCodes map[int]int
	select {
	case floodCodes = <-flood:
	case <-time.After(time.Minute):
		t.Fatal("the flood did not stop within a minute")
	}

	p99Alone, p99Beside := quantileOf(alone, 0.99), quantileOf(beside, 0.99)
	t.Logf("steady workspace, %v requests/s of %d items: alone p50 %v p99 %v %v; beside the flood p50 %v p99 %v %v; p99 ratio %.2f",
		rate, items, quantileOf(alone, 0.5), p99Alone, codesAlone, quantileOf(beside, 0.5), p99Beside, codes,
		float64(p99Beside)/float64(max(p99Alone, time.Millisecond)))
	t.Logf("flooding workspace: answers by status %v", floodCodes)
	if codesAlone[http.StatusOK] != len(alone) || acceptedAlone != len(alone)*items {
		t.Fatalf("alone: answers %v, %d items accepted of %d", codesAlone, acceptedAlone, len(alone)*items)
	}
	if codes[http.StatusOK] != len(beside) || accepted != len(beside)*items {
		t.Errorf("beside the flood: answers %v, %d items accepted of %d", codes, accepted, len(beside)*items)
	}
	if code := p.stop(t); code != 0 {
		t.Errorf("exit code %d after SIGTERM", code)
	}
}

package ingestapi

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/apikey"
)

// An unknown key costs one database round trip, however often it is sent,
// and a malformed one none.
func TestUnknownKeyIsLookedUpOnce(t *testing.T) {
	f := newAPIFixture(t)
	unknown, err := apikey.New()
	if err != nil {
		t.Fatal(err)
	}
	before := f.a.Keys.Lookups.Load()
	for range 20 {
		if code, _ := f.call(t, "PUT", "/v1/customers/c-1", unknown.Secret, `{}`); code != 401 {
			t.Fatalf("unknown key answered %d, want 401", code)
		}
		if code, _ := f.call(t, "PUT", "/v1/customers/c-1", "spk_not-a-key", `{}`); code != 401 {
			t.Fatalf("malformed key answered %d, want 401", code)
		}
	}
	if n := f.a.Keys.Lookups.Load() - before; n != 1 {
		t.Errorf("20 requests with one unknown key and 20 with a malformed one made %d key lookups, want 1", n)
	}
}

// A flood of distinct unknown keys fills only its own lookup lane: a real
// client whose cache entry expired is still checked and served.
func TestKeyFloodDoesNotStarveRealClients(t *testing.T) {
	f := newAPIFixture(t)
	if code, _ := f.call(t, "PUT", "/v1/customers/c-1", f.keyA, `{}`); code != 201 && code != 200 {
		t.Fatalf("real client: %d", code)
	}
	f.a.Keys.SetTTL(time.Millisecond) // every request of the real client looks its key up again

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var floodMu sync.Mutex
	floodCodes := map[int]int{}
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Timeout: 10 * time.Second}
			for {
				select {
				case <-stop:
					return
				default:
				}
				k, _ := apikey.New()
				req, _ := http.NewRequest("PUT", f.base+"/v1/customers/x", strings.NewReader(`{}`))
				req.Header.Set("Authorization", "Bearer "+k.Secret)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					continue
				}
				resp.Body.Close()
				floodMu.Lock()
				floodCodes[resp.StatusCode]++
				floodMu.Unlock()
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the flood is under way
	for i := range 20 {
		time.Sleep(5 * time.Millisecond)
		if code, out := f.call(t, "PUT", "/v1/customers/c-1", f.keyA, `{}`); code != 200 {
			t.Errorf("real client request %d during the flood: %d %v", i, code, out)
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("flood answers by status: %v", floodCodes)
	if floodCodes[401] == 0 {
		t.Error("the flood was never answered 401: the test did not exercise lookups")
	}
}

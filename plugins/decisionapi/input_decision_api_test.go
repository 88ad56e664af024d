package decisionapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/redisconn"
	"github.com/speculapro/speculapro/plugins/redisspool"
)

// queueDecided puts decided transactions from..to-1 on a's queue, as the
// handler does.
func queueDecided(a *decisionAPI, from, to int) {
	for i := from; i < to; i++ {
		m := service.NewMessage(fmt.Appendf(nil, `{"external_id":"d-%d"}`, i))
		m.MetaSetMut("ingest_key", "w:acc")
		a.out <- m
	}
}

// Close parks in redis_spool's spool exactly what the engine was not seen to
// deliver: the batches it took and never acknowledged (it drops any batch
// once its stop has begun), then what it never took, oldest first; an
// acknowledged batch is not parked again.
func TestDecisionCloseParksWhatTheEngineDropped(t *testing.T) {
	rc, err := redisconn.Open(testenv.RedisURL(t))
	if err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("sptest:decision:park:%d:", time.Now().UnixNano())
	key := prefix + redisspool.SpoolKey
	t.Cleanup(func() { rc.Del(context.Background(), key); _ = rc.Close() })
	a := newDecisionAPIMetered(service.MockResources())
	a.redis, a.spoolPrefix = rc, prefix
	ctx := context.Background()

	queueDecided(a, 0, 5)
	delivered, ack, err := a.ReadBatch(ctx)
	if err != nil || len(delivered) != 5 {
		t.Fatalf("ReadBatch: %d, %v; want the 5 queued", len(delivered), err)
	}
	_ = ack(ctx, nil)
	queueDecided(a, 5, 8)
	if dropped, _, err := a.ReadBatch(ctx); err != nil || len(dropped) != 3 { // never acknowledged
		t.Fatalf("ReadBatch: %d, %v; want the 3 queued", len(dropped), err)
	}
	queueDecided(a, 8, 10) // never taken
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	raw, err := rc.LRange(ctx, key, 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range raw {
		var e struct {
			Meta  map[string]string `json:"meta"`
			Value struct {
				ExternalID string `json:"external_id"`
			} `json:"value"`
		}
		if err := json.Unmarshal([]byte(r), &e); err != nil || e.Meta["ingest_key"] != "w:acc" {
			t.Fatalf("spool entry %s: %v, want redis_spool's form with the metadata", r, err)
		}
		got = append(got, e.Value.ExternalID)
	}
	if want := "[d-5 d-6 d-7 d-8 d-9]"; fmt.Sprint(got) != want {
		t.Errorf("parked %v, want %s", got, want)
	}
}

// lockedBuffer is a log sink a test reads while the code under test writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// With Redis unreachable at Close, what the engine did not deliver is lost:
// one ERROR line says how many, naming no transaction, and Close still ends
// within its Redis bound.
func TestDecisionCloseLogsTheLostCount(t *testing.T) {
	rc, err := redisconn.Open("redis://127.0.0.1:1/0") // nothing listens there
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	var out lockedBuffer
	log := service.NewLoggerFromSlog(slog.New(slog.NewTextHandler(&out, nil)))
	a := newDecisionAPIMetered(service.MockResources(service.MockResourcesOptUseLogger(log)))
	a.redis, a.spoolPrefix = rc, "sptest:decision:lost:"
	ctx := context.Background()
	queueDecided(a, 0, 4)
	if _, _, err := a.ReadBatch(ctx); err != nil { // never acknowledged
		t.Fatal(err)
	}
	queueDecided(a, 4, 7)
	start := time.Now()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("Close took %v with Redis unreachable", took)
	}
	line := out.String()
	if !strings.Contains(line, "level=ERROR") || !strings.Contains(line, "msg=\""+logStopLost+"\"") || !strings.Contains(line, "events=7") {
		t.Errorf("log %q, want one ERROR %q with events=7", line, logStopLost)
	}
	if strings.Contains(line, "d-") {
		t.Errorf("the LOST line names a transaction: %q", line)
	}
}

// BenchmarkDecisionReadBatch: the input's share of each decided
// transaction's trip to the pipeline, one decision a batch (the batch size at
// a modest rate) through ReadBatch and its acknowledgement.
func BenchmarkDecisionReadBatch(b *testing.B) {
	a := newDecisionAPIMetered(service.MockResources())
	m := service.NewMessage([]byte(`{"external_id":"d"}`))
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		a.out <- m
		batch, ack, err := a.ReadBatch(ctx)
		if err != nil || len(batch) != 1 {
			b.Fatal(len(batch), err)
		}
		_ = ack(ctx, nil)
	}
}

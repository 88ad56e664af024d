package featureupdate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/features"
)

func TestFeatureUpdateConfig(t *testing.T) {
	for _, tt := range []struct {
		yaml    string
		wantErr string
	}{
		{yaml: "{}"},
		{yaml: "url: redis://127.0.0.1:17001,redis://127.0.0.1:17002\nkinds: [account_event]\nbest_effort: true"},
		{yaml: "replay_ttl: 45m\nkey_prefix: 'x:'\ntimeout: 2s"},
		{yaml: "kinds: [refund]", wantErr: "neither"},
		{yaml: "kinds: []", wantErr: "at least one"},
		{yaml: "key_prefix: ''", wantErr: "must not be empty"},
		{yaml: "replay_ttl: 10ms", wantErr: "at least 1s"},
		{yaml: "replicas_to_wait: 1\nreplica_wait_timeout: 500ms"},
		{yaml: "replicas_to_wait: -1", wantErr: "must not be negative"},
		{yaml: "replicas_to_wait: 1\nreplica_wait_timeout: 0s", wantErr: "at least 1ms"},
		{yaml: "timeout: 0s", wantErr: "positive"},
		{yaml: "url: 'http://u:hunter2@h:1'", wantErr: "url"},
		{yaml: "replay_ttl: soon", wantErr: "duration"},
	} {
		conf, err := featureUpdateSpec().ParseYAML(tt.yaml, nil)
		if err == nil {
			_, err = newFeatureUpdate(conf, service.MockResources())
		}
		switch {
		case tt.wantErr == "" && err != nil:
			t.Errorf("%q: %v", tt.yaml, err)
		case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
			t.Errorf("%q: error %v, want one containing %q", tt.yaml, err, tt.wantErr)
		case err != nil && strings.Contains(err.Error(), "hunter2"):
			t.Errorf("%q: error quotes the password: %v", tt.yaml, err)
		}
	}
}

var ws = event.UUID{0x10, 0x20, 0x30, 0x40, 0x50, 0x60, 0x70, 0x80, 0x90, 0xa0, 0xb0, 0xc0, 0xd0, 0xe0, 0xf0, 0x01}

func encode(t *testing.T, e event.Envelope) []byte {
	t.Helper()
	b, err := event.Encode(e)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func testBatch(t *testing.T) (service.MessageBatch, [][]byte) {
	// Relative to the clock: the decoder refuses times outside the partition window.
	at := time.Now().UTC().Truncate(time.Hour).Add(-time.Hour)
	txn := encode(t, event.Envelope{Kind: event.KindTransaction, ID: event.TransactionID(ws, "t1", at), WorkspaceID: ws,
		ExternalID: "t1", OccurredAt: at, AccountExternalID: "acc-1", CustomerExternalID: "cust-1",
		Amount: "12.50", Currency: "EUR", Direction: event.DirectionOut,
		Counterparty: &event.Counterparty{Name: "Shop", Fingerprint: "fp1"}})
	ae := encode(t, event.Envelope{Kind: event.KindAccountEvent, ID: event.AccountEventID(ws, "a1", at), WorkspaceID: ws,
		ExternalID: "a1", OccurredAt: at.Add(time.Minute), CustomerExternalID: "cust-1", Type: "sim_swap"})
	raws := [][]byte{txn, ae, []byte(`not json`), txn}
	batch := service.MessageBatch{}
	for _, r := range raws {
		batch = append(batch, service.NewMessage(r))
	}
	batch[3].SetError(fmt.Errorf("flagged earlier"))
	return batch, raws
}

func newProc(t *testing.T, yaml string) *featureUpdate {
	t.Helper()
	conf, err := featureUpdateSpec().ParseYAML(yaml, nil)
	if err != nil {
		t.Fatal(err)
	}
	p, err := newFeatureUpdate(conf, service.MockResources())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close(context.Background()) })
	return p
}

func featuresOf(msg *service.Message) map[string]any {
	v, ok := msg.MetaGetMut("features")
	if !ok {
		return nil
	}
	// feature_update attaches the features as figures; rule_eval builds
	// the features its rules read from them, and Map builds them all.
	return v.(*features.Values).Map()
}

func TestFeatureUpdateOnRedis(t *testing.T) {
	for name, url := range map[string]func(testing.TB) string{"single": testenv.RedisURL, "cluster": testenv.RedisClusterURL} {
		t.Run(name, func(t *testing.T) {
			prefix := fmt.Sprintf("sptest:fu:%s:%d:", name, time.Now().UnixNano())
			p := newProc(t, fmt.Sprintf("url: %q\nkey_prefix: %q", url(t), prefix))
			batch, raws := testBatch(t)
			// The stream hands decoded envelopes on; the first message carries one.
			env, err := event.Decode(raws[0])
			if err != nil {
				t.Fatal(err)
			}
			batch[0] = eventmsg.With(batch[0], &env)
			out, err := p.ProcessBatch(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			got := out[0]
			tf := featuresOf(got[0])
			acct, _ := tf["account"].(map[string]any)
			cp, _ := tf["counterparty"].(map[string]any)
			if acct["out_count_1h"] != int64(1) || acct["out_sum_1h"] != json.Number("12.5000") || acct["new_counterparty"] != true {
				t.Errorf("transaction's account features: %v", acct)
			}
			if cp["paid_count_24h"] != int64(1) || cp["distinct_payers_30d"] != int64(1) {
				t.Errorf("transaction's counterparty features: %v", cp)
			}
			cust, _ := featuresOf(got[1])["customer"].(map[string]any)
			if cust["seconds_since_sim_swap"] != int64(0) || fmt.Sprint(cust["events_1h"]) != "map[sim_swap:1]" {
				t.Errorf("account event's customer features: %v", cust)
			}
			if featuresOf(got[2]) != nil || featuresOf(got[3]) != nil {
				t.Error("a message that is not an envelope, or was flagged, got features")
			}
			for i, m := range got {
				if b, _ := m.AsBytes(); string(b) != string(raws[i]) {
					t.Errorf("message %d changed", i)
				}
			}
		})
	}
}

func TestFeatureUpdateKinds(t *testing.T) {
	prefix := fmt.Sprintf("sptest:fu:kinds:%d:", time.Now().UnixNano())
	p := newProc(t, fmt.Sprintf("url: %q\nkey_prefix: %q\nkinds: [account_event]\nbest_effort: true", testenv.RedisURL(t), prefix))
	batch, _ := testBatch(t)
	// As in ingest: counterparty_fingerprint left the messages structured.
	for _, m := range batch[:2] {
		v, err := m.AsStructuredMut()
		if err != nil {
			t.Fatal(err)
		}
		m.SetStructuredMut(v)
	}
	out, err := p.ProcessBatch(context.Background(), batch)
	if err != nil {
		t.Fatal(err)
	}
	if featuresOf(out[0][0]) != nil {
		t.Error("a transaction got features with kinds [account_event]")
	}
	if cust, _ := featuresOf(out[0][1])["customer"].(map[string]any); cust["seconds_since_sim_swap"] != int64(0) {
		t.Errorf("account event's features: %v", featuresOf(out[0][1]))
	}
}

func TestFeatureUpdateRedisDown(t *testing.T) {
	closed := "redis://" + testenv.FreeAddr(t) + "/0"
	t.Run("best effort passes batches through", func(t *testing.T) {
		p := newProc(t, fmt.Sprintf("url: %q\nbest_effort: true", closed))
		for range 3 {
			batch, raws := testBatch(t)
			out, err := p.ProcessBatch(context.Background(), batch)
			if err != nil {
				t.Fatal(err)
			}
			for i, m := range out[0] {
				if b, _ := m.AsBytes(); string(b) != string(raws[i]) || featuresOf(m) != nil {
					t.Errorf("message %d not passed through untouched", i)
				}
			}
		}
		p.mu.Lock()
		defer p.mu.Unlock()
		// One WARN for the first failure; the other two batches are counted
		// for the next one (they skipped Redis for skipAfterFailure).
		// A WARN went out: the limiter holds the next one back.
		another := false
		p.warns.Do(func() { another = true })
		if another || p.skipped != 2 {
			t.Errorf("WARN due again %v, skipped %d; want one WARN and 2 batches since", another, p.skipped)
		}
	})
	t.Run("stream retries until the context ends", func(t *testing.T) {
		p := newProc(t, fmt.Sprintf("url: %q", closed))
		batch, _ := testBatch(t)
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		start := time.Now()
		if _, err := p.ProcessBatch(ctx, batch); err == nil {
			t.Fatal("ProcessBatch succeeded with Redis down")
		}
		if d := time.Since(start); d < 600*time.Millisecond {
			t.Errorf("gave up after %v, before the context ended", d)
		}
	})
}

type countedIncrs struct{ n int64 }

func (c *countedIncrs) Incr(n int64, _ ...string) { c.n += n }

// A metric that follows one of the Store's totals counts exactly what the
// total grew by, never a negative step, whatever the order of the readings.
func TestRunningTotalCountsWhatTheTotalGrewBy(t *testing.T) {
	var c countedIncrs
	rt := runningTotal{c: &c}
	for _, tc := range []struct{ total, want int64 }{
		{0, 0}, {5, 5}, {5, 5}, {12, 12}, {9, 12}, {20, 20},
	} {
		rt.follow(tc.total)
		if c.n != tc.want {
			t.Fatalf("after a reading of %d the metric counts %d, want %d", tc.total, c.n, tc.want)
		}
	}
}

// TestReplicaWaitHook: a pipeline that writes ends with WAIT; on a Redis
// without the replicas asked for, its commands fail with ErrNotReplicated
// (so the batch is retried, not acknowledged), and a pipeline of reads is
// left alone.
func TestReplicaWaitHook(t *testing.T) {
	r := testenv.PrivateRedis(t)
	c := goredis.NewClient(&goredis.Options{Addr: r.Addr()})
	defer c.Close()
	c.AddHook(replicaWaitHook{replicas: 1, timeout: 50 * time.Millisecond})
	ctx := context.Background()

	pipe := c.Pipeline()
	set := pipe.Set(ctx, "k", "v", 0)
	_, err := pipe.Exec(ctx)
	if !errors.Is(err, ErrNotReplicated) || !errors.Is(set.Err(), ErrNotReplicated) {
		t.Fatalf("write without a replica: Exec %v, SET %v; want ErrNotReplicated", err, set.Err())
	}
	pipe = c.Pipeline()
	get := pipe.Get(ctx, "k")
	if _, err := pipe.Exec(ctx); err != nil || get.Val() != "v" {
		t.Fatalf("read: %q, %v", get.Val(), err)
	}
}

package tests

import (
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/event"
)

// TestStreamBadInput: a record that is not JSON and one of an unknown
// envelope version, among valid transactions, are counted
// (speculapro_stream_records_skipped_total{reason="undecodable"}) and
// skipped with the documented WARN line, never sent to a dead-letter topic (the
// persister owns those); a rule that throws on every event at run time
// (event.metadata.nothing.deeper: a field of null) is counted in
// speculapro_stream_rule_errors_total{rule} and the stream carries on: the
// other rules' hits and the totals are exactly the model's.
func TestStreamBadInput(t *testing.T) {
	t.Parallel()
	cfg := proofConfig(lgSeed(t), 3000, 0, 200)
	testenv.Binary(t)
	s := newProofStack(t, "badinput", testenv.RedisURL(t))
	r := newProofRun(t, cfg)
	throwing := proofRule{name: "t_throws", appliesTo: "transaction", alert: true, expr: `event.metadata.nothing.deeper > 1`}
	x := newExactRun(t, s, r, throwing)

	ws := r.g.Workspaces()[0].String()
	bad := []*kgo.Record{
		{Key: []byte(ws + ":acc-x"), Value: []byte("this is not JSON {")},
		{Key: []byte(ws + ":acc-y"), Value: []byte(`{"v":99,"kind":"transaction","id":"0190a6a8-0000-7000-8000-000000000001","workspace_id":"` + ws + `"}`)},
	}
	half := cfg.Count / 2
	s.produceLG(t, r.g, event.KindTransaction, 0, half, 0)
	for _, rec := range bad {
		rec.Topic = s.prefix + "txn.ingested"
	}
	s.produce(t, bad...)
	s.produceLG(t, r.g, event.KindTransaction, half, cfg.Count, 0)

	p := s.startStream(t, "stream", streamPipeline, nil)
	s.waitDrained(t, p, s.group, s.prefix+"txn.ingested", cfg.Count+len(bad), drainBound(cfg.Count))
	var scrape string
	waitUntil(t, 30*time.Second, "the stream's metrics", func() error {
		var err error
		scrape, err = p.scrape()
		return err
	})
	stopAll(t, p)

	if n := metricSum(scrape, "speculapro_stream_records_skipped_total", `reason="undecodable"`); n != 2 {
		t.Errorf("speculapro_stream_records_skipped_total{reason=undecodable} = %v, want 2:\n%s", n, metricLines(scrape, "speculapro_stream_"))
	}
	if !persistLogLine("WARN", "stream: skipped undecodable records").MatchString(p.tail(1 << 20)) {
		t.Errorf("no WARN line `stream: skipped undecodable records` in the stream's log:\n%s", p.tail(4000))
	}
	if n := metricSum(scrape, "speculapro_stream_rule_errors_total", `rule="t_throws"`); n != float64(cfg.Count) {
		t.Errorf("speculapro_stream_rule_errors_total{rule=t_throws} = %v, want %d (one per transaction):\n%s",
			n, cfg.Count, metricLines(scrape, "speculapro_stream_rule"))
	}
	if n := metricSum(scrape, "speculapro_stream_events_evaluated_total"); n != float64(cfg.Count) {
		t.Errorf("speculapro_stream_events_evaluated_total = %v, want %d", n, cfg.Count)
	}
	if got := s.consume(t, s.prefix+"txn.ingested.dlq", 0, 2*time.Second); len(got) != 0 {
		t.Errorf("%d records on the dead-letter topic, want none (the stream has no DLQ)", len(got))
	}
	// One WARN line a minute per rule: the run is shorter than two minutes,
	// so at most two for each workspace's copy of the rule.
	perRule := map[string]int{}
	for _, line := range strings.Split(p.tail(1<<20), "\n") {
		if strings.Contains(line, `msg="stream: rule failed on an event"`) {
			_, rest, _ := strings.Cut(line, "rule_id=")
			id, _, _ := strings.Cut(rest, " ")
			perRule[id]++
		}
	}
	if len(perRule) != cfg.Workspaces {
		t.Errorf("WARN lines for %d failing rules, want one per workspace (%d): %v", len(perRule), cfg.Workspaces, perRule)
	}
	for id, n := range perRule {
		if n > 2 {
			t.Errorf("rule %s logged %d times in under two minutes, want at most one a minute", id, n)
		}
	}
	x.check(t, "with bad input and a throwing rule", 1)
}

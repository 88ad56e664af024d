package rules

import (
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// benchExpressions are the shapes of the starter pack's rules; the 100-rule
// benchmark repeats them with other thresholds.
var benchExpressions = []string{
	`event.direction == "out" && event.amount >= %d && features.account.new_counterparty == true`,
	`event.direction == "out" && features.account.out_count_1h >= %d`,
	`event.direction == "out" && features.account.out_sum_24h >= %d`,
	`event.direction == "out" && event.amount >= 9000 && event.amount < 10000 && features.account.out_count_24h >= 3 && features.account.out_sum_24h >= %d`,
	`event.amount >= %d && event.amount %% 1000 == 0`,
	`features.account.seconds_since_previous == -1 && event.amount >= %d`,
	`event.direction == "out" && (features.account.in_sum_24h | 0) >= %d && features.account.out_sum_24h >= features.account.in_sum_24h * 0.9`,
	`event.direction == "in" && features.account.distinct_senders_24h >= %d`,
	`features.customer != null && features.customer.seconds_since_sim_swap >= 0 && features.customer.seconds_since_sim_swap <= 86400 && event.amount >= %d`,
	`(features.customer.events_1h.failed_otp | 0) >= 3 && event.amount >= %d`,
	`(features.customer.events_24h.new_device | 0) >= 1 && event.amount >= %d`,
	`features.counterparty != null && features.counterparty.distinct_payers_24h >= %d`,
}

func benchRules(n int) []Rule {
	rs := make([]Rule, n)
	for i := range rs {
		expr := fmt.Sprintf(benchExpressions[i%len(benchExpressions)], 5+i)
		rs[i] = Rule{Name: fmt.Sprintf("r%03d", i), AppliesTo: event.KindTransaction, Expression: expr,
			Severity: "high", Action: "alert", Alert: true, Score: "10", Enabled: true}
	}
	return rs
}

func benchInput() (*event.Envelope, map[string]any) {
	env := &event.Envelope{V: 1, Kind: event.KindTransaction, ExternalID: "t-1", OccurredAt: time.Now().UTC(),
		CustomerExternalID: "c-1", AccountExternalID: "a-1", Type: "transfer", Amount: "9500.00", Currency: "EUR",
		Direction: event.DirectionOut, Status: "completed", Channel: "online",
		Counterparty: &event.Counterparty{Name: "Acme", IdentifierKind: "iban", IdentifierMasked: "DE** 3000", Fingerprint: "ab12"},
		Metadata:     json.RawMessage(`{"source":"loadgen","seed":1}`)}
	totals := func() map[string]any {
		return map[string]any{
			"out_count_1h": int64(2), "out_count_24h": int64(4), "out_count_7d": int64(9), "out_count_30d": int64(30),
			"in_count_1h": int64(0), "in_count_24h": int64(1), "in_count_7d": int64(3), "in_count_30d": int64(8),
			"out_sum_1h": json.Number("12000.0000"), "out_sum_24h": json.Number("28500.0000"), "out_sum_7d": json.Number("40000.0000"), "out_sum_30d": json.Number("90000.0000"),
			"in_sum_1h": json.Number("0.0000"), "in_sum_24h": json.Number("30000.0000"), "in_sum_7d": json.Number("31000.0000"), "in_sum_30d": json.Number("95000.0000"),
			"distinct_payees_24h": int64(3), "distinct_payees_30d": int64(12), "distinct_senders_24h": int64(1), "distinct_senders_30d": int64(4),
			"new_counterparty": true, "seconds_since_previous": int64(120),
		}
	}
	cust := totals()
	cust["events_1h"] = map[string]any{"failed_otp": int64(1)}
	cust["events_24h"] = map[string]any{"failed_otp": int64(1), "new_device": int64(1)}
	cust["events_7d"] = map[string]any{"failed_otp": int64(1), "new_device": int64(1)}
	cust["seconds_since_sim_swap"] = int64(-1)
	cust["seconds_since_profile_change"] = int64(-1)
	features := map[string]any{
		"account":  totals(),
		"customer": cust,
		"counterparty": map[string]any{"paid_count_24h": int64(7), "paid_count_30d": int64(40),
			"paid_sum_24h": json.Number("50000.0000"), "paid_sum_30d": json.Number("200000.0000"),
			"distinct_payers_24h": int64(6), "distinct_payers_30d": int64(20)},
	}
	return env, features
}

func benchmarkEvaluate(b *testing.B, n int) {
	p, err := Compile(benchRules(n))
	if err != nil {
		b.Fatal(err)
	}
	env, features := benchInput()
	runBenchmark(b, p, func() ([]Hit, []RuleError) { return p.Evaluate(env, features) })
}

// BenchmarkEvaluate12 is one event against a starter-pack-sized workspace.
func BenchmarkEvaluate12(b *testing.B) { benchmarkEvaluate(b, 12) }

// BenchmarkEvaluate100 is one event against a hundred rules.
func BenchmarkEvaluate100(b *testing.B) { benchmarkEvaluate(b, 100) }

// benchmarkEvaluateFeatures is benchmarkEvaluate the way the stream runs
// it: the features given one by one, only those the rules name built into
// the input, in one reused Scratch.
func benchmarkEvaluateFeatures(b *testing.B, n int) { benchmarkEvaluateWith(b, n, true) }

// benchmarkEvaluateWith is benchmarkEvaluateFeatures with the native
// evaluator on or off (every rule through Bloblang: the baseline).
func benchmarkEvaluateWith(b *testing.B, n int, native bool) {
	p, err := compile(benchRules(n), native)
	if err != nil {
		b.Fatal(err)
	}
	env, features := benchInput()
	var sc Scratch
	runBenchmark(b, p, func() ([]Hit, []RuleError) { return p.EvaluateFeatures(env, MapFeatures(features), &sc) })
}

// runBenchmark runs eval, one evaluation of p, b.N times, and reports the
// CPU time per evaluation (on a machine other processes share, wall time
// also counts the time the benchmark waited for a core, CPU time does
// not), the hits and how many rules run natively.
func runBenchmark(b *testing.B, p *Program, eval func() ([]Hit, []RuleError)) {
	hits, errs := eval()
	if len(errs) != 0 {
		b.Fatalf("rule errors on the benchmark input: %v", errs)
	}
	b.ReportAllocs()
	var before, after syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &before)
	for b.Loop() {
		eval()
	}
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &after)
	cpu := after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano()
	b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(len(hits)), "hits/event")
	b.ReportMetric(float64(p.Native()), "native-rules")
}

// BenchmarkEvaluateFeatures12 is BenchmarkEvaluate12 as the stream runs it.
func BenchmarkEvaluateFeatures12(b *testing.B) { benchmarkEvaluateFeatures(b, 12) }

// BenchmarkEvaluateFeatures100 is BenchmarkEvaluate100 as the stream runs it.
func BenchmarkEvaluateFeatures100(b *testing.B) { benchmarkEvaluateFeatures(b, 100) }

// BenchmarkEvaluateFeatures12Bloblang is BenchmarkEvaluateFeatures12 with
// every rule run through Bloblang, the baseline the native evaluator is
// measured against.
func BenchmarkEvaluateFeatures12Bloblang(b *testing.B) { benchmarkEvaluateWith(b, 12, false) }

// BenchmarkEvaluateFeatures100Bloblang is BenchmarkEvaluateFeatures100 with
// every rule run through Bloblang.
func BenchmarkEvaluateFeatures100Bloblang(b *testing.B) { benchmarkEvaluateWith(b, 100, false) }

// BenchmarkInput is the baseline: building the input alone, which every
// evaluation pays once whatever the number of rules.
func BenchmarkInput(b *testing.B) {
	env, features := benchInput()
	b.ReportAllocs()
	for b.Loop() {
		Input(env, features)
	}
}

// quietInput is a loadgen-like ordinary transaction: a small payment to a
// known payee on a quiet account, which most rules do not fire on (the
// common case in a stream or a backtest).
func quietInput() (*event.Envelope, map[string]any) {
	env, features := benchInput()
	env.Amount = "124.37"
	for _, sec := range []string{"account", "customer"} {
		m := features[sec].(map[string]any)
		m["out_count_1h"], m["out_count_24h"], m["distinct_senders_24h"] = int64(0), int64(1), int64(0)
		m["out_sum_24h"], m["in_sum_24h"] = json.Number("124.3700"), json.Number("0.0000")
		m["new_counterparty"], m["seconds_since_previous"] = false, int64(86000)
	}
	cust := features["customer"].(map[string]any)
	cust["events_1h"], cust["events_24h"] = map[string]any{}, map[string]any{}
	features["counterparty"].(map[string]any)["distinct_payers_24h"] = int64(1)
	return env, features
}

// BenchmarkEvaluateStarterPack100 is the backtest's 100-rule workspace (the
// starter pack's rules in turn, renamed) on a loadgen-like ordinary
// transaction, as the stream runs it: the cost of the evaluator itself, few
// hits to report.
func BenchmarkEvaluateStarterPack100(b *testing.B) {
	defs, _ := starterPack(b)
	rs := make([]Rule, 100)
	for i := range rs {
		rs[i] = defs[i%len(defs)].Rule
		rs[i].Name = fmt.Sprintf("%s_%d", rs[i].Name, i)
	}
	p, err := Compile(rs)
	if err != nil {
		b.Fatal(err)
	}
	env, features := quietInput()
	var sc Scratch
	runBenchmark(b, p, func() ([]Hit, []RuleError) { return p.EvaluateFeatures(env, MapFeatures(features), &sc) })
}

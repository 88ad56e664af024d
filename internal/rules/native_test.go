package rules

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redpanda-data/benthos/v4/public/bloblang"

	"github.com/speculapro/speculapro/internal/event"
)

// Every starter rule runs natively: the stream builds no Bloblang input
// for the pack.
func TestStarterPackIsNative(t *testing.T) {
	defs, prog := starterPack(t)
	if n := prog.Native(); n != len(defs) {
		for _, kp := range prog.kinds {
			for i, fn := range kp.native {
				if fn == nil {
					t.Errorf("rule %s runs through Bloblang", kp.rules[i].Name)
				}
			}
		}
	}
}

// refOutcome is what Bloblang makes of one rule on one input: "hit",
// "no_hit", "not_bool:<type>" or "error:<message>".
func refOutcome(exec *bloblang.Executor, in map[string]any) string {
	v, err := exec.Query(in)
	switch b, ok := v.(bool); {
	case err != nil:
		return "error:" + err.Error()
	case !ok:
		return "not_bool:" + typeName(v)
	case b:
		return "hit"
	}
	return "no_hit"
}

// nativeCheck runs expr natively and through Bloblang on each input and
// reports the first difference: a value Bloblang does not give, or errBlob
// where Bloblang succeeds. It returns how many inputs the native evaluator
// left to Bloblang (errUnsup), and false when expr is outside the native
// subset (or not Bloblang).
func nativeCheck(t testing.TB, expr string, envs []*event.Envelope, feats []map[string]any) (unsup int, native bool) {
	return nativeCheckStats(t, expr, envs, feats, nil)
}

func nativeCheckStats(t testing.TB, expr string, envs []*event.Envelope, feats []map[string]any, stats map[string]int) (unsup int, native bool) {
	t.Helper()
	r := rule("diff", expr)
	exec, err := compileOne(&r)
	if err != nil {
		return 0, false
	}
	var slots slotTable
	fn, err := compileNative(expr, &slots)
	if err != nil {
		return 0, false
	}
	var c evalCtx
	for k, env := range envs {
		in := Input(env, feats[k])
		want := refOutcome(exec, in)
		c.reset(env, MapFeatures(feats[k]), len(slots.index))
		v, err := fn.v(&c)
		var got string
		switch {
		case err == errUnsup:
			unsup++
			continue
		case err == errBlob:
			if strings.HasPrefix(want, "error:") {
				if stats != nil {
					stats["error"]++
				}
				continue
			}
			got = "error"
		case err != nil:
			got = "unexpected " + err.Error()
		case v.k != vBool:
			got = "not_bool:" + v.typeName()
		case v.b:
			got = "hit"
		default:
			got = "no_hit"
		}
		if stats != nil {
			k, _, _ := strings.Cut(want, ":")
			stats[k]++
		}
		if got != want {
			md, _ := json.Marshal(in)
			t.Fatalf("%s\non %s:\nnative %s, Bloblang %s", expr, md, got, want)
		}
	}
	return unsup, true
}

// Every starter rule's test cases decide natively as in Bloblang, and the
// program as a whole (hits, their reads, errors) as the Bloblang-only one.
func TestNativeStarterPackAsBloblang(t *testing.T) {
	defs, prog := starterPack(t)
	blob, err := compile(defRules(defs), false)
	if err != nil {
		t.Fatal(err)
	}
	var envs []*event.Envelope
	var feats []map[string]any
	for _, d := range defs {
		for _, tc := range d.Tests {
			envs, feats = append(envs, tc.Event), append(feats, tc.Features)
		}
	}
	for _, d := range defs {
		if unsup, ok := nativeCheck(t, d.Rule.Expression, envs, feats); !ok || unsup > 0 {
			t.Errorf("%s: native %v, left to Bloblang on %d inputs", d.Rule.Name, ok, unsup)
		}
	}
	var sc Scratch
	for k, env := range envs {
		wantHits, wantErrs := blob.Evaluate(env, feats[k])
		gotHits, gotErrs := prog.EvaluateFeatures(env, MapFeatures(feats[k]), &sc)
		sameDecisions(t, fmt.Sprint(k), gotHits, gotErrs, wantHits, wantErrs)
	}
}

func sameDecisions(t *testing.T, what string, gotHits []Hit, gotErrs []RuleError, wantHits []Hit, wantErrs []RuleError) {
	t.Helper()
	if len(gotHits) != len(wantHits) {
		t.Fatalf("%s: %d hits, Bloblang %d", what, len(gotHits), len(wantHits))
	}
	for i := range gotHits {
		if gotHits[i].Rule.Name != wantHits[i].Rule.Name || !reflect.DeepEqual(gotHits[i].Reads, wantHits[i].Reads) {
			t.Fatalf("%s: hit %s reads %v, Bloblang %s reads %v", what, gotHits[i].Rule.Name, gotHits[i].Reads, wantHits[i].Rule.Name, wantHits[i].Reads)
		}
	}
	if len(gotErrs) != len(wantErrs) {
		t.Fatalf("%s: errors %v, Bloblang %v", what, gotErrs, wantErrs)
	}
	for i := range gotErrs {
		if gotErrs[i].Error() != wantErrs[i].Error() {
			t.Fatalf("%s: error %v, Bloblang %v", what, gotErrs[i], wantErrs[i])
		}
	}
}

// exprGen generates expressions in (and around) the native subset.
type exprGen struct{ r *rand.Rand }

var (
	genEventPaths = []string{"event.amount", "event.direction", "event.type", "event.channel", "event.currency",
		"event.reference", "event.v", "event.kind", "event.external_id", "event.metadata.country",
		"event.metadata.n", "event.metadata.list.0", "event.metadata", "event.counterparty.name",
		"event.counterparty", "event.nope", "event.amount.x", "this.event.amount", "event.customer_external_id"}
	genFeaturePaths = []string{"features.account.out_count_1h", "features.account.out_sum_24h",
		"features.account.new_counterparty", "features.account.in_sum_24h", "features.account.seconds_since_previous",
		"features.account.missing", "features.customer.events_1h.failed_otp", "features.customer.events_1h",
		"features.customer.seconds_since_sim_swap", "features.customer", "features.counterparty.distinct_payers_24h",
		"features.counterparty", "this.features.account.out_count_1h", "features.account.odd"}
	genLiterals = []string{"0", "1", "-1", "3", "1000", "5000", "9223372036854775807", "0.0", "0.9", "2.5", "-0.5",
		`"out"`, `"in"`, `""`, `"0"`, `"cash"`, `"ES"`, "true", "false", "null", `"""raw"""`, `"a\"b"`}
	genCmp   = []string{"==", "!=", ">", ">=", "<", "<="}
	genArith = []string{"+", "-", "*", "/", "%", "|"}
)

func (g exprGen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g exprGen) operand(depth int) string {
	switch n := g.r.IntN(10); {
	case depth <= 0 || n < 3:
		switch g.r.IntN(3) {
		case 0:
			return g.pick(genEventPaths)
		case 1:
			return g.pick(genFeaturePaths)
		}
		return g.pick(genLiterals)
	case n < 5:
		return "(" + g.expr(depth-1) + ")"
	case n < 6:
		return "!" + g.operand(depth-1)
	case n < 7:
		return "-" + g.operand(depth-1)
	case n < 8:
		m := []string{".floor()", ".ceil()", ".round()"}[g.r.IntN(3)]
		return "(" + g.expr(depth-1) + ")" + m
	case n < 9:
		return "(" + g.expr(depth-1) + ").or(" + g.operand(depth-1) + ")"
	}
	return "(" + g.expr(depth-1) + ").catch(" + g.pick(genLiterals) + ")"
}

// boolExpr is a rule's usual shape: comparisons joined by && and ||.
func (g exprGen) boolExpr(depth int) string {
	var b strings.Builder
	for i := range 1 + g.r.IntN(4) {
		if i > 0 {
			b.WriteString([]string{" && ", " || ", " &&\n  "}[g.r.IntN(3)])
		}
		switch g.r.IntN(6) {
		case 0:
			b.WriteString(g.operand(depth))
		case 1:
			b.WriteString("!(" + g.boolExpr(depth-1) + ")")
		default:
			b.WriteString(g.operand(depth) + " " + g.pick(genCmp) + " " + g.operand(depth))
		}
	}
	return b.String()
}

// typed is a comparison of like with like, as rules are mostly written:
// numbers (with defaults and arithmetic), strings, bools, null checks.
func (g exprGen) typed() string {
	num := func() string {
		switch g.r.IntN(6) {
		case 4:
			// Overflows as int64 and not as float64: the result's type shows.
			return "(" + g.pick(genNumPaths) + " % 7) * 9223372036854775807"
		case 0:
			return g.pick(genNumLits)
		case 1:
			return "(" + g.pick(genNumPaths) + " | " + g.pick(genNumLits) + ")"
		case 2:
			return g.pick(genNumPaths) + " " + g.pick([]string{"+", "-", "*", "/", "%"}) + " " + g.pick(genNumLits)
		}
		return g.pick(genNumPaths)
	}
	switch g.r.IntN(7) {
	case 3:
		return "(" + g.pick([]string{"features.customer", "features.counterparty", "features.account", "event.metadata"}) +
			" | " + g.pick(genNumLits) + ") " + g.pick([]string{"==", "!="}) + " " + g.pick(genNumLits)
	case 0:
		return g.pick(genStrPaths) + " " + g.pick([]string{"==", "!=", "==", "<"}) + " " + g.pick(genStrLits)
	case 1:
		return g.pick(genFeaturePaths) + " " + g.pick([]string{"==", "!="}) + " " + g.pick([]string{"null", "true", "false"})
	case 2:
		return "(" + num() + ").floor() == " + num()
	}
	return num() + " " + g.pick(genCmp) + " " + num()
}

var (
	genNumPaths = []string{"event.amount", "features.account.out_count_1h", "features.account.out_sum_24h",
		"features.account.in_sum_24h", "features.customer.events_1h.failed_otp", "features.customer.seconds_since_sim_swap",
		"features.counterparty.distinct_payers_24h", "event.metadata.n", "features.account.seconds_since_previous"}
	genNumLits  = []string{"0", "1", "-1", "3", "1000", "5000", "9000", "10000", "0.9", "2.5", "27000", "9223372036854775807"}
	genStrPaths = []string{"event.direction", "event.type", "event.channel", "event.reference", "event.metadata.country", "event.counterparty.name"}
	genStrLits  = []string{`"out"`, `"in"`, `"cash"`, `"atm"`, `"ES"`, `""`, `"0"`}
)

// rule is an expression of any of the shapes.
func (g exprGen) rule(depth int) string {
	switch g.r.IntN(4) {
	case 0:
		return g.expr(depth)
	case 1:
		return g.boolExpr(depth)
	}
	var b strings.Builder
	for i := range 1 + g.r.IntN(4) {
		if i > 0 {
			b.WriteString([]string{" && ", " || ", " &&\n  "}[g.r.IntN(3)])
		}
		if g.r.IntN(5) == 0 {
			b.WriteString("!(" + g.typed() + ")")
		} else {
			b.WriteString(g.typed())
		}
	}
	return b.String()
}

func (g exprGen) expr(depth int) string {
	var b strings.Builder
	b.WriteString(g.operand(depth))
	for range g.r.IntN(4) {
		var op string
		switch g.r.IntN(3) {
		case 0:
			op = g.pick(genCmp)
		case 1:
			op = g.pick(genArith)
		default:
			op = []string{"&&", "||"}[g.r.IntN(2)]
		}
		b.WriteString(" " + op + " ")
		if g.r.IntN(8) == 0 {
			b.WriteString("\n  ")
		}
		b.WriteString(g.operand(depth))
	}
	return b.String()
}

// genValue is a feature or metadata value of any type rules meet.
func genValue(r *rand.Rand) any {
	switch r.IntN(12) {
	case 0:
		return nil
	case 1:
		return r.IntN(2) == 0
	case 2, 3:
		return int64(r.IntN(20) - 3)
	case 4:
		return []int64{0, 1000, 5000, 9223372036854775807, -9223372036854775808}[r.IntN(5)]
	case 5, 6:
		return json.Number([]string{"0.0000", "27500.0000", "4500.5000", "0", "100", "-0", "1e3", "0.9", "1e400", "abc"}[r.IntN(10)])
	case 7:
		return []float64{0, 0.5, -2.5, 1e300, 5000}[r.IntN(5)]
	case 8:
		return []string{"", "0", "out", "ES", "10"}[r.IntN(5)]
	case 9:
		return map[string]any{"failed_otp": int64(r.IntN(6)), "sign_in": int64(1)}
	case 10:
		return []any{int64(1), "x"}
	}
	return map[string]any{}
}

func genSection(r *rand.Rand, names ...string) any {
	if r.IntN(6) == 0 {
		return nil
	}
	m := map[string]any{}
	for _, n := range names {
		if r.IntN(5) != 0 {
			m[n] = genValue(r)
		}
	}
	return m
}

func genInput(r *rand.Rand) (*event.Envelope, map[string]any) {
	pick := func(xs ...string) string { return xs[r.IntN(len(xs))] }
	env := &event.Envelope{V: 1, Kind: event.KindTransaction, ExternalID: pick("", "t-1"),
		OccurredAt: time.Date(2026, 12, 1, 12, 0, 0, r.IntN(1e9), time.UTC),
		Amount:     pick("", "6000.00", "9500", "0", "0.00", "-1", "1e3", "abc", "7000.50", "100000000000000000000"),
		Direction:  event.Direction(pick("", "out", "in")), Type: pick("", "cash", "transfer", "card"),
		Channel: pick("", "atm", "online"), Currency: pick("", "EUR"), Reference: pick("", "r", "0")}
	if r.IntN(2) == 0 {
		env.Metadata = json.RawMessage(pick(`{"country":"ES","n":3,"list":[1,"x"]}`, `{"country":null}`, `{"n":"0.0"}`, `[1]`, `"s"`))
	}
	if r.IntN(2) == 0 {
		env.Counterparty = &event.Counterparty{Name: pick("", "Acme"), Fingerprint: "ab"}
	}
	features := map[string]any{
		"account":      genSection(r, "out_count_1h", "out_sum_24h", "new_counterparty", "in_sum_24h", "seconds_since_previous", "odd"),
		"customer":     genSection(r, "events_1h", "seconds_since_sim_swap"),
		"counterparty": genSection(r, "distinct_payers_24h"),
	}
	if r.IntN(10) == 0 {
		features = nil
	}
	return env, features
}

// diffSize is how many generated expressions TestNativeAsBloblang checks
// (SP_TEST_RULES_DIFF raises it).
func diffSize() int {
	if n, err := strconv.Atoi(os.Getenv("SP_TEST_RULES_DIFF")); err == nil && n > 0 {
		return n
	}
	return 1200
}

// Generated expressions × generated events and features: the native
// evaluator gives Bloblang's value, and fails exactly where Bloblang fails.
func TestNativeAsBloblang(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 13))
	g := exprGen{r}
	const inputs = 24
	envs, feats := make([]*event.Envelope, inputs), make([]map[string]any, inputs)
	for i := range envs {
		envs[i], feats[i] = genInput(r)
	}
	n := diffSize()
	native, checked, unsup := 0, 0, 0
	stats := map[string]int{}
	for range n {
		expr := g.rule(3)
		u, ok := nativeCheckStats(t, expr, envs, feats, stats)
		if ok {
			native++
			checked += inputs - u
			unsup += u
		}
	}
	t.Logf("%d expressions, %d native; %d evaluations compared (%v), %d left to Bloblang", n, native, checked, stats, unsup)
	if native < n/2 {
		t.Errorf("only %d of %d generated expressions are native", native, n)
	}
	if unsup*20 > checked {
		t.Errorf("%d of %d evaluations left to Bloblang", unsup, checked)
	}
}

// The whole program on generated rules: hits in order with their reads, and
// each error's message, as the Bloblang-only program gives them.
func TestNativeProgramAsBloblang(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 7))
	g := exprGen{r}
	for round := range 15 {
		var rs []Rule
		for i := range 20 {
			for {
				x := rule(fmt.Sprintf("r%d", i), g.rule(2))
				if _, err := compileOne(&x); err == nil {
					rs = append(rs, x)
					break
				}
			}
		}
		prog, err := Compile(rs)
		if err != nil {
			t.Fatal(err)
		}
		blob, err := compile(rs, false)
		if err != nil {
			t.Fatal(err)
		}
		var sc Scratch
		for k := range 30 {
			env, features := genInput(r)
			wantHits, wantErrs := blob.Evaluate(env, features)
			gotHits, gotErrs := prog.EvaluateFeatures(env, MapFeatures(features), &sc)
			sameDecisions(t, fmt.Sprintf("round %d input %d", round, k), gotHits, gotErrs, wantHits, wantErrs)
		}
	}
}

// FuzzNativeAsBloblang: any expression Bloblang compiles and the native
// parser accepts decides natively as in Bloblang, on generated inputs.
func FuzzNativeAsBloblang(f *testing.F) {
	paths, _ := starterPackPaths()
	defs, _ := ParseFiles(paths...)
	for _, d := range defs {
		f.Add(d.Rule.Expression, uint64(1))
	}
	g := exprGen{rand.New(rand.NewPCG(3, 4))}
	for range 50 {
		f.Add(g.rule(3), uint64(2))
	}
	f.Add("event.amount == (event.amount / 1000).floor() * 1000", uint64(3))
	f.Add("-event.amount < 0 || !(features.customer != null)", uint64(4))
	f.Fuzz(func(t *testing.T, expr string, seed uint64) {
		r := rand.New(rand.NewPCG(seed, 1))
		envs, feats := make([]*event.Envelope, 8), make([]map[string]any, 8)
		for i := range envs {
			envs[i], feats[i] = genInput(r)
		}
		nativeCheck(t, expr, envs, feats)
	})
}

package rules

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
)

func txn(amount, direction string) *event.Envelope {
	return &event.Envelope{V: 1, Kind: event.KindTransaction, Amount: amount, Currency: "EUR", Direction: event.Direction(direction)}
}

func rule(name, expr string) Rule {
	return Rule{Name: name, AppliesTo: event.KindTransaction, Expression: expr, Severity: "high", Action: "alert", Alert: true, Score: "10", Enabled: true}
}

func TestEvaluate(t *testing.T) {
	features := map[string]any{
		"account": map[string]any{
			"out_count_1h":     int64(4),
			"out_sum_24h":      json.Number("27500.0000"),
			"new_counterparty": true,
		},
		"customer":     nil,
		"counterparty": nil,
	}
	rs := []Rule{
		rule("big", `event.amount >= 5000`),
		rule("small", `event.amount < 5000`),
		rule("new_payee", "event.direction == \"out\" &&\n  features.account.new_counterparty"),
		rule("sum_exact", `features.account.out_sum_24h == 27500 && this.features.account.out_count_1h >= 4`),
		rule("missing_customer", `features.customer.events_1h.failed_otp >= 3`),
		rule("null_safe", `(features.customer.events_1h.failed_otp | 0) >= 3`),
		rule("not_bool", `event.amount`),
		rule("yields_null", `features.customer`),
		rule("round", `event.amount % 1000 == 0`),
		{Name: "acct_event", AppliesTo: event.KindAccountEvent, Expression: `true`, Severity: "low", Action: "alert", Score: "0"},
	}
	p, err := Compile(rs)
	if err != nil {
		t.Fatal(err)
	}
	if p.Len() != len(rs) {
		t.Fatalf("Len = %d, want %d", p.Len(), len(rs))
	}
	hits, errs := p.Evaluate(txn("6000.00", "out"), features)
	var got []string
	for _, h := range hits {
		got = append(got, h.Rule.Name)
	}
	if strings.Join(got, ",") != "big,new_payee,sum_exact,round" {
		t.Errorf("hits = %v", got)
	}
	gotErrs := map[string]error{}
	for _, e := range errs {
		gotErrs[e.Rule.Name] = e.Err
	}
	if len(gotErrs) != 3 {
		t.Errorf("errors = %v, want missing_customer, not_bool and yields_null", gotErrs)
	}
	if err := gotErrs["missing_customer"]; err == nil || !strings.Contains(err.Error(), "cannot compare types null") {
		t.Errorf("missing_customer error = %v, want the comparison with null", err)
	}
	for _, name := range []string{"not_bool", "yields_null"} {
		if !errors.Is(gotErrs[name], ErrNotBool) {
			t.Errorf("%s error = %v, want ErrNotBool", name, gotErrs[name])
		}
	}
	// Reads: the features.* paths the expression names, with their values.
	for _, h := range hits {
		switch h.Rule.Name {
		case "new_payee":
			if len(h.Reads) != 1 || h.Reads["features.account.new_counterparty"] != true {
				t.Errorf("new_payee reads %v", h.Reads)
			}
		case "sum_exact":
			if h.Reads["features.account.out_sum_24h"] != json.Number("27500.0000") || h.Reads["features.account.out_count_1h"] != int64(4) {
				t.Errorf("sum_exact reads %v", h.Reads)
			}
		case "big":
			if h.Reads != nil {
				t.Errorf("big reads %v, want none", h.Reads)
			}
		}
	}

	// An account event runs the account-event rules only.
	hits, errs = p.Evaluate(&event.Envelope{V: 1, Kind: event.KindAccountEvent, Type: "sim_swap"}, nil)
	if len(hits) != 1 || hits[0].Rule.Name != "acct_event" || len(errs) != 0 {
		t.Errorf("account event: hits %v errs %v", hits, errs)
	}
}

func TestCompileErrorsNameRuleAndPosition(t *testing.T) {
	cases := []struct {
		name, expr string
		line, col  int
		msg        string
	}{
		{"bad_op", "event.amount >= 5000 &&\n  features.x >== 3", 2, 16, "expected query"},
		{"bad_fn", "nope(3)", 1, 8, "unrecognised function"},
		{"escape", "true) \nroot.y = (false", 1, 5, "unexpected ')'"},
		{"unclosed", "(event.amount > 3", 1, 1, "never closed"},
		{"impure", `env("HOME") == "x"`, 1, 12, "unrecognised function"},
		{"empty", "  ", 1, 1, "empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Compile([]Rule{rule("ok", "true"), rule(c.name, c.expr)})
			var ce *CompileError
			if !errors.As(err, &ce) {
				t.Fatalf("Compile = %v, want a *CompileError", err)
			}
			if ce.Rule != c.name || ce.Line != c.line || ce.Column != c.col || !strings.Contains(ce.Error(), c.msg) {
				t.Fatalf("got %q at %d:%d: %v; want rule %q at %d:%d containing %q", ce.Rule, ce.Line, ce.Column, ce, c.name, c.line, c.col, c.msg)
			}
		})
	}
}

func TestCheckBalancedIgnoresStringsAndComments(t *testing.T) {
	for _, expr := range []string{
		`event.reference == ")"`,
		"event.reference == \"\"\")(\"\"\"",
		"true # )\n",
		`event.metadata.note == "\")"`,
		`[1, 2].contains(1) && {"a": 1}.a == 1`,
	} {
		if _, _, err := checkBalanced(expr); err != nil {
			t.Errorf("checkBalanced(%q) = %v", expr, err)
		}
	}
}

func TestInputShape(t *testing.T) {
	env := txn("12.50", "in")
	env.Metadata = json.RawMessage(`{"country":"FR","n":3}`)
	env.Counterparty = &event.Counterparty{Name: "Acme", Fingerprint: "ab"}
	in := Input(env, nil)
	ev := in["event"].(map[string]any)
	if ev["amount"] != json.Number("12.50") || ev["direction"] != "in" || in["features"] != nil {
		t.Fatalf("input %v", in)
	}
	if md := ev["metadata"].(map[string]any); md["country"] != "FR" || md["n"] != json.Number("3") {
		t.Fatalf("metadata %v", md)
	}
	if _, ok := ev["reference"]; ok {
		t.Fatalf("an empty field is present: %v", ev)
	}
	if ev["counterparty"].(map[string]any)["name"] != "Acme" {
		t.Fatalf("counterparty %v", ev["counterparty"])
	}
}

func TestCanonicalScore(t *testing.T) {
	for in, want := range map[string]string{"40": "40", "40.0000": "40", "007.50": "7.5", "-0.0": "0", "0.25": "0.25", "-3.10": "-3.1"} {
		if got := CanonicalScore(in); got != want {
			t.Errorf("CanonicalScore(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestEvaluateConcurrently: the stream evaluates one workspace's program from
// several pipeline threads at once.
func TestEvaluateConcurrently(t *testing.T) {
	p, err := Compile(benchRules(24))
	if err != nil {
		t.Fatal(err)
	}
	env, features := benchInput()
	want, _ := p.Evaluate(env, features)
	done := make(chan int)
	for range 4 {
		go func() {
			n := 0
			for range 200 {
				hits, errs := p.Evaluate(env, features)
				if len(hits) != len(want) || len(errs) != 0 {
					n++
				}
			}
			done <- n
		}()
	}
	for range 4 {
		if bad := <-done; bad != 0 {
			t.Errorf("%d evaluations differed from the first", bad)
		}
	}
}

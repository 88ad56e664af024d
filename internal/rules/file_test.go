package rules

import (
	"encoding/json"
	"strings"
	"testing"
)

const goodFile = `rules:
  - name: large_amount_to_new_counterparty
    description: A payment of 5,000 or more to a new payee.
    severity: high
    score: 40.50
    expression: |
      event.direction == "out" && event.amount >= 5000 &&
        features.account.new_counterparty
    tests:
      - name: fires on 6,000 to a new payee
        event: { direction: out, amount: "6000.00", currency: EUR }
        features: { account: { new_counterparty: true, out_sum_24h: 6000.00, out_count_1h: 1 } }
        expect: hit
      - name: quiet on a known payee
        event: { direction: out, amount: 6000, currency: EUR }
        features: { account: { new_counterparty: false } }
        expect: no_hit
  - name: otp
    applies_to: account_event
    action: review
    alert: false
    enabled: false
    mode: shadow
    expression: '(features.customer.events_1h.failed_otp | 0) >= 3'
    tests:
      - name: three failures
        event: { type: failed_otp }
        features: { customer: { events_1h: { failed_otp: 3 } } }
        expect: hit
`

func TestParseGoodFile(t *testing.T) {
	defs, err := Parse("good.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(defs) != 2 {
		t.Fatalf("%d definitions", len(defs))
	}
	a, b := defs[0], defs[1]
	if a.Line != 2 || a.Rule.Score != "40.50" || a.Rule.Severity != "high" || a.Rule.Action != "alert" || !a.Rule.Alert || !a.Rule.Enabled ||
		a.Rule.AppliesTo != "transaction" || !strings.HasSuffix(a.Rule.Expression, "new_counterparty") {
		t.Errorf("first rule %+v", a)
	}
	if b.Rule.AppliesTo != "account_event" || b.Rule.Alert || b.Rule.Enabled || b.Rule.Severity != "medium" || b.Rule.Score != "0" ||
		b.Rule.Mode != ModeShadow || !b.Rule.Shadow() || a.Rule.Mode != ModeLive || a.Rule.Shadow() {
		t.Errorf("second rule %+v", b.Rule)
	}
	tc := a.Tests[0]
	if tc.Line != 10 || !tc.Hit || tc.Event.Amount != "6000.00" || tc.Event.Kind != "transaction" {
		t.Errorf("first test %+v", tc)
	}
	if a.Tests[1].Event.Amount != "6000" {
		t.Errorf("a number amount = %q, want its text", a.Tests[1].Event.Amount)
	}
	acct := tc.Features["account"].(map[string]any)
	if acct["out_sum_24h"] != json.Number("6000.00") || acct["out_count_1h"] != int64(1) {
		t.Errorf("features %v: want json.Number and int64", acct)
	}
	// Positions: a block scalar and a quoted one.
	if l, c := a.Position(2, 3); l != 8 || c != 9 {
		t.Errorf("block position 2:3 -> %d:%d, want 8:9", l, c)
	}
	if l, c := b.Position(1, 2); l != 24 || c != 19 {
		t.Errorf("quoted position 1:2 -> %d:%d, want 24:19", l, c)
	}

	results, err := RunTests(defs)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if failed := Report(&out, results); failed != 0 {
		t.Fatalf("failed %d:\n%s", failed, out.String())
	}
	if !strings.Contains(out.String(), "PASS large_amount_to_new_counterparty: fires on 6,000 to a new payee") {
		t.Errorf("report:\n%s", out.String())
	}
}

func TestParseRefusesWithPosition(t *testing.T) {
	cases := []struct{ name, file, want string }{
		{"unknown field", "rules:\n  - name: a\n    expresion: true\n", "f.yaml:3: field expresion not found in a rule"},
		{"unknown test field", "rules:\n  - name: a\n    expression: 'true'\n    tests:\n      - name: x\n        expected: hit\n", "f.yaml:6: field expected not found in a test"},
		{"bad name", "rules:\n  - name: Big-One\n    expression: 'true'\n", `f.yaml:2: rule "Big-One": name must match`},
		{"bad enum", "rules:\n  - name: a\n    severity: urgent\n    action: block\n    expression: 'true'\n", "severity must be low"},
		{"bad mode", "rules:\n  - name: a\n    mode: dark\n    expression: 'true'\n", `f.yaml:2: rule "a": mode must be live or shadow`},
		{"bad score", "rules:\n  - name: a\n    score: 1e3\n    expression: 'true'\n", "score must be a decimal"},
		{"compile error in a block", "rules:\n  - name: a\n    expression: |\n      event.amount >= 5000 &&\n        features.x >== 3\n", `f.yaml:5:22: rule "a": expected query`},
		{"compile error in a plain scalar", "rules:\n  - name: a\n    expression: nope(3)\n", `f.yaml:3:24: rule "a": unrecognised function 'nope'`},
		{"bad expect", "rules:\n  - name: a\n    expression: 'true'\n    tests:\n      - name: x\n        expect: yes\n", `f.yaml:5: rule "a": test "x": expect must be hit or no_hit`},
		{"unknown event field", "rules:\n  - name: a\n    expression: 'true'\n    tests:\n      - name: x\n        event: { amout: 3 }\n        expect: hit\n", `unknown field "amout"`},
		{"no rules", "rules: []\n", "f.yaml: no rules"},
		{"not yaml", "rules: [\n", "f.yaml:"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("f.yaml", []byte(c.file))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Parse = %v, want %q", err, c.want)
			}
		})
	}
}

func TestReportFailsRuleWithoutTests(t *testing.T) {
	defs, err := Parse("f.yaml", []byte("rules:\n  - name: a\n    expression: event.amount > 1\n    tests:\n      - name: wrong\n        event: { amount: 0.5 }\n        expect: hit\n      - name: errs\n        event: {}\n        expect: no_hit\n  - name: b\n    expression: 'true'\n"))
	if err != nil {
		t.Fatal(err)
	}
	results, err := RunTests(defs)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if failed := Report(&out, results); failed != 3 {
		t.Fatalf("failed = %d, want 3:\n%s", failed, out.String())
	}
	for _, want := range []string{
		"FAIL a: wrong (f.yaml:5): want hit, got no_hit",
		"FAIL a: errs (f.yaml:8): want no_hit, got error: ",
		"FAIL f.yaml:11: b: rule has no tests",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

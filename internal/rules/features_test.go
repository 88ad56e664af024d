package rules

import (
	"reflect"
	"sort"
	"testing"
)

// EvaluateFeatures, which builds only the features the rules name, decides
// every starter pack test case as Evaluate does with all of them: the same
// hits, the same values read, the same failures.
func TestEvaluateFeaturesAsEvaluate(t *testing.T) {
	defs, prog := starterPack(t)
	for _, kp := range prog.kinds {
		if kp.allFeatures {
			t.Fatal("the starter pack's features are all named, yet the program takes them all")
		}
	}
	cases, hits := 0, 0
	var sc Scratch // reused by every case, as by the stream's batches
	for _, d := range defs {
		for _, tc := range d.Tests {
			want, wantErrs := prog.Evaluate(tc.Event, tc.Features)
			got, gotErrs := prog.EvaluateFeatures(tc.Event, MapFeatures(tc.Features), &sc)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("%s / %s: hits %v, Evaluate gives %v", d.Rule.Name, tc.Name, got, want)
			}
			if len(gotErrs) != len(wantErrs) {
				t.Errorf("%s / %s: %d rule errors, Evaluate gives %d", d.Rule.Name, tc.Name, len(gotErrs), len(wantErrs))
			}
			cases, hits = cases+1, hits+len(want)
		}
	}
	if hits == 0 {
		t.Fatalf("no hit in %d cases", cases)
	}
}

// The features a program builds: those its expressions name, or all of
// them when one uses the features (or the input) otherwise.
func TestFeatureNeeds(t *testing.T) {
	for _, tc := range []struct {
		expr string
		want []string // nil: all
	}{
		{`features.account.out_count_1h > 3 && (features.customer.events_1h.failed_otp | 0) >= 3`, []string{"account.out_count_1h", "customer.events_1h"}},
		{`this.features.counterparty.paid_sum_24h.number() > 5 && event.amount > 1`, []string{"counterparty.paid_sum_24h"}},
		{`features.account.in_sum_24h * 0.9 <= features.account.out_sum_24h`, []string{"account.in_sum_24h", "account.out_sum_24h"}},
		{`event.features.x == 1`, []string{}},
		{`features.account.keys().length() > 3`, nil},
		{`features.account.get("out_count_1h") > 3`, nil},
		{`features.keys().length() > 0`, nil},
		{`features == null`, nil},
		{`(features.account | {}).out_count_1h > 1`, nil},
		{`features."account".out_count_1h > 1`, nil},
		{`this.keys().contains("features")`, nil},
		{`match event.amount { this > 5 => true, _ => false }`, nil},
	} {
		needs, all := featureNeeds([]string{tc.expr})
		if tc.want == nil {
			if !all {
				t.Errorf("%s: needs %v, want all", tc.expr, needs)
			}
			continue
		}
		got := []string{}
		for sec, names := range needs {
			for _, n := range names {
				got = append(got, sec+"."+n)
			}
		}
		sort.Strings(got)
		sort.Strings(tc.want)
		if all || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: needs %v (all %v), want %v", tc.expr, got, all, tc.want)
		}
	}
}

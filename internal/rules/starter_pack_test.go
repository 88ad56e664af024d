package rules

import (
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// TestStarterPack runs config/rules' own test cases and checks the pack's
// promise: every rule has at least one hit and one no_hit case.
func TestStarterPack(t *testing.T) {
	defs, _ := starterPack(t)
	if len(defs) < 12 {
		t.Errorf("the starter pack has %d rules, want at least 12", len(defs))
	}
	for _, d := range defs {
		var hit, noHit bool
		for _, tc := range d.Tests {
			hit, noHit = hit || tc.Hit, noHit || !tc.Hit
		}
		if !hit || !noHit {
			t.Errorf("%s: rule %s needs a hit and a no_hit test", d.File, d.Rule.Name)
		}
	}
	results, err := RunTests(defs)
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if failed := Report(&out, results); failed != 0 {
		t.Fatalf("%d starter pack tests failed:\n%s", failed, out.String())
	}
}

// The envelope fields a program's input holds: those its expressions name,
// or all of them when one uses the event (or the input) as a whole.
func TestEventFields(t *testing.T) {
	for _, tc := range []struct {
		exprs []string
		want  []string // nil: every field
	}{
		{[]string{`event.amount >= 5 && event.direction == "out"`}, []string{"amount", "direction"}},
		{[]string{`this.event.amount > 1 && features.account.x > 1`, `event.counterparty.name == "a"`}, []string{"amount", "counterparty"}},
		{[]string{`this.features.account.out_count_1h > 3`}, []string{}},
		{[]string{`event.amount > 1`, `event.keys().length() > 3`}, nil},
		{[]string{`event.get("amount") > 1`}, nil},
		{[]string{`(event | {}).amount > 1`}, nil},
		{[]string{`this.keys().contains("event")`}, nil},
		{[]string{`this.event.keys().length() > 1`}, nil},
		{[]string{`features.account.event.x == 1 && event.type == "cash"`}, []string{"type"}},
		{[]string{`"prevent.this" == event.channel`}, []string{"channel"}},
	} {
		got := eventFields(tc.exprs)
		if tc.want == nil {
			if got != nil {
				t.Errorf("%q: fields %v, want all", tc.exprs, got)
			}
			continue
		}
		if got == nil || len(got) != len(tc.want) {
			t.Errorf("%q: fields %v, want %v", tc.exprs, got, tc.want)
			continue
		}
		for _, f := range tc.want {
			if !got[f] {
				t.Errorf("%q: fields %v, want %v", tc.exprs, got, tc.want)
			}
		}
	}
}

// The starter pack's program reads only some envelope fields, and on every
// one of its test cases decides exactly as on the whole envelope.
func TestPrunedInputDecidesAsWhole(t *testing.T) {
	defs, _ := starterPack(t)
	prog, err := compile(defRules(defs), false) // all of it in Bloblang
	if err != nil {
		t.Fatal(err)
	}
	for kind, kp := range prog.kinds {
		if kp.fields == nil {
			t.Errorf("%s: the starter pack's program reads the whole envelope", kind)
		}
		for _, d := range defs {
			for _, tc := range d.Tests {
				if tc.Event.Kind != kind {
					continue
				}
				got, err1 := kp.exec.Query(input(tc.Event, tc.Features, kp.fields))
				want, err2 := kp.exec.Query(Input(tc.Event, tc.Features))
				if !reflect.DeepEqual(got, want) || (err1 == nil) != (err2 == nil) {
					t.Errorf("%s %q: %v (%v) on the pruned input, %v (%v) on the whole", d.Rule.Name, tc.Name, got, err1, want, err2)
				}
			}
		}
	}
}

// starterPack parses config/rules and compiles all its rules as one program.
func starterPack(t testing.TB) ([]Definition, *Program) {
	t.Helper()
	paths, err := starterPackPaths()
	if err != nil || len(paths) == 0 {
		t.Fatalf("no starter pack files (%v)", err)
	}
	defs, err := ParseFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
	prog, err := Compile(defRules(defs))
	if err != nil {
		t.Fatal(err)
	}
	return defs, prog
}

func defRules(defs []Definition) []Rule {
	var rs []Rule
	for _, d := range defs {
		rs = append(rs, d.Rule)
	}
	return rs
}

func starterPackPaths() ([]string, error) { return filepath.Glob("../../config/rules/*.yaml") }

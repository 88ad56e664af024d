package rules

import (
	"path/filepath"
	"strings"
	"testing"
)

// TestStarterPack runs config/rules' own test cases and checks the pack's
// promise: every rule has at least one hit and one no_hit case.
func TestStarterPack(t *testing.T) {
	paths, err := filepath.Glob("../../config/rules/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no starter pack files (%v)", err)
	}
	defs, err := ParseFiles(paths...)
	if err != nil {
		t.Fatal(err)
	}
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

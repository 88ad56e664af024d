package rules

import (
	"errors"
	"fmt"
	"io"
)

// ErrNoTests: a rule file's rule has no test case; `rules test` refuses it,
// since a rule nobody has seen fire is a rule nobody knows works.
var ErrNoTests = errors.New("rule has no tests")

// TestResult is the outcome of one test case (Case nil: the rule has none).
type TestResult struct {
	Def  *Definition
	Case *TestCase
	Pass bool
	Got  string // hit, no_hit, or error
	Err  error  // the rule's evaluation error, or ErrNoTests
}

// RunTests compiles every definition into one program, as the stream does,
// and evaluates each test case with it.
func RunTests(defs []Definition) ([]TestResult, error) {
	rs := make([]Rule, len(defs))
	for i := range defs {
		rs[i] = defs[i].Rule
	}
	prog, err := Compile(rs)
	if err != nil {
		return nil, fmt.Errorf("compiling the rules under test: %w", err)
	}
	var out []TestResult
	for i := range defs {
		d := &defs[i]
		if len(d.Tests) == 0 {
			out = append(out, TestResult{Def: d, Err: ErrNoTests})
			continue
		}
		for j := range d.Tests {
			tc := &d.Tests[j]
			res := TestResult{Def: d, Case: tc, Got: ExpectNoHit}
			hits, errs := prog.Evaluate(tc.Event, tc.Features)
			for _, h := range hits {
				if h.Rule.Name == d.Rule.Name {
					res.Got = ExpectHit
				}
			}
			for _, e := range errs {
				if e.Rule.Name == d.Rule.Name {
					res.Got, res.Err = "error", e.Err
				}
			}
			res.Pass = res.Err == nil && (res.Got == ExpectHit) == tc.Hit
			out = append(out, res)
		}
	}
	return out, nil
}

// Report prints one line per result, PASS or FAIL, and a summary, and
// returns how many failed.
func Report(w io.Writer, results []TestResult) int {
	failed := 0
	for _, r := range results {
		if r.Case == nil {
			failed++
			fmt.Fprintf(w, "FAIL %s:%d: %s: %v\n", r.Def.File, r.Def.Line, r.Def.Rule.Name, r.Err)
			continue
		}
		if r.Pass {
			fmt.Fprintf(w, "PASS %s: %s\n", r.Def.Rule.Name, r.Case.Name)
			continue
		}
		failed++
		want := ExpectNoHit
		if r.Case.Hit {
			want = ExpectHit
		}
		fmt.Fprintf(w, "FAIL %s: %s (%s:%d): want %s, got %s", r.Def.Rule.Name, r.Case.Name, r.Def.File, r.Case.Line, want, r.Got)
		if r.Err != nil {
			fmt.Fprintf(w, ": %v", r.Err)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "%d test cases, %d failed\n", len(results), failed)
	return failed
}

package rules

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/redpanda-data/benthos/v4/public/bloblang"

	"github.com/speculapro/speculapro/internal/event"
)

// Evaluation errors, wrapped in a RuleError.
var (
	// ErrNotBool: the expression ran but yielded something other than a bool.
	ErrNotBool = errors.New("expression did not yield a bool")
)

// blobl is the environment expressions compile in: pure functions only (no
// env(), file(), hostname(): a rule must not read the machine it runs on)
// and no imports.
var blobl = bloblang.NewEnvironment().OnlyPure().WithDisabledImports()

// CompileError says why one rule's expression does not compile and where:
// Line and Column are 1-based, within the expression text (ParseFiles turns
// them into a position in the rule file).
type CompileError struct {
	Rule         string
	Line, Column int
	Err          error
}

func (e *CompileError) Error() string {
	return fmt.Sprintf("rule %q: expression %d:%d: %v", e.Rule, e.Line, e.Column, e.Err)
}

func (e *CompileError) Unwrap() error { return e.Err }

// Program is a set of rules compiled into one Bloblang mapping per event
// kind, run once per event. It is immutable and safe for concurrent use.
type Program struct {
	kinds map[event.Kind]*kindProgram
}

// kindProgram is the program of the rules of one kind. A rule whose
// expression is in the native subset runs as native[i] (native.go); the
// others run together in exec, one Bloblang program yielding an array
// with one element per such rule (blobRules[j] the rule of element j):
// its bool, or null when the rule's expression failed (each is wrapped in
// .catch(null), so one rule's failure leaves the others' results intact).
// single holds each rule alone in Bloblang, without the catch, run to
// explain a failure and to decide what the native evaluator leaves to
// Bloblang.
type kindProgram struct {
	exec      *bloblang.Executor // nil when every rule is native
	blobRules []int
	rules     []*Rule
	native    []*compiled // nil where the rule runs through Bloblang
	slots     int         // the features the native rules read, numbered
	single    []*bloblang.Executor
	reads     [][]readPath
	// fields are the envelope fields the expressions name (event.<f>);
	// nil when one uses the event as a whole: the input then holds all.
	fields map[string]bool
	// needs are the features the expressions name, section → names, for
	// EvaluateFeatures to build only those; allFeatures when one uses the
	// features otherwise (a whole section, a method on one, `this`).
	needs       map[string][]string
	allFeatures bool
	exprs       []string
	evaluated   *Evaluated
}

// Evaluated is the rules a program evaluates every event of one kind
// against, live and shadow alike: what an event is counted against in a
// rule's hit rate. One value per program and kind, shared by every event
// it evaluates, so a step can carry it on each event for free and count
// events per value.
type Evaluated struct {
	Rules []*Rule
}

// Evaluated returns the rules every event of kind is evaluated against,
// nil when the program has none of that kind.
func (p *Program) Evaluated(kind event.Kind) *Evaluated {
	if kp := p.kinds[kind]; kp != nil {
		return kp.evaluated
	}
	return nil
}

// readPath is one features.* path an expression names.
type readPath struct {
	key  string   // "features.account.out_count_1h"
	segs []string // ["account", "out_count_1h"]
}

// Hit is one rule that fired on one event, with the features.* paths its
// expression names and their values (nil when absent): what an analyst needs
// to see why it fired.
type Hit struct {
	Rule  *Rule
	Reads map[string]any
}

// RuleError is one rule that could not be decided on one event (a missing
// field compared with a number, a type error, a result that is not a bool).
// The other rules of the event are unaffected.
type RuleError struct {
	Rule *Rule
	Err  error
}

func (e RuleError) Error() string { return fmt.Sprintf("rule %q: %v", e.Rule.Name, e.Err) }

// Compile compiles rules (whatever their Enabled) into one program per event
// kind. The first expression that does not compile is returned as a
// *CompileError naming the rule and the line:column inside its expression.
func Compile(rules []Rule) (*Program, error) { return compile(rules, true) }

// CompileBloblang is Compile with every rule run through Bloblang, none
// natively: the baseline benchmarks measure the native evaluator against.
func CompileBloblang(rules []Rule) (*Program, error) { return compile(rules, false) }

// compile is Compile; without native every rule runs through Bloblang (the
// baseline the tests and benchmarks compare the native evaluator with).
func compile(rules []Rule, native bool) (*Program, error) {
	p := &Program{kinds: map[event.Kind]*kindProgram{}}
	texts := map[event.Kind]*strings.Builder{}
	slots := map[event.Kind]*slotTable{}
	for i := range rules {
		r := rules[i] // the program keeps its own copy: hits point at it
		single, err := compileOne(&r)
		if err != nil {
			return nil, err
		}
		kp := p.kinds[r.AppliesTo]
		if kp == nil {
			kp = &kindProgram{}
			p.kinds[r.AppliesTo] = kp
			slots[r.AppliesTo] = &slotTable{}
		}
		var fn *compiled
		if native {
			fn, _ = compileNative(r.Expression, slots[r.AppliesTo]) // nil: outside the subset
		}
		kp.rules = append(kp.rules, &r)
		kp.native = append(kp.native, fn)
		kp.single = append(kp.single, single)
		kp.reads = append(kp.reads, featureReads(r.Expression))
		kp.exprs = append(kp.exprs, r.Expression)
		if fn != nil {
			continue
		}
		if texts[r.AppliesTo] == nil {
			texts[r.AppliesTo] = &strings.Builder{}
			texts[r.AppliesTo].WriteString("root = [\n")
		}
		kp.blobRules = append(kp.blobRules, len(kp.rules)-1)
		// Each expression sits alone between its own parentheses (checked
		// balanced by compileOne), so no rule can reach into another's.
		fmt.Fprintf(texts[r.AppliesTo], "(\n%s\n).catch(null),\n", r.Expression)
	}
	for kind, kp := range p.kinds {
		kp.evaluated = &Evaluated{Rules: kp.rules}
		kp.slots = len(slots[kind].index)
		kp.fields = eventFields(kp.exprs)
		kp.needs, kp.allFeatures = featureNeeds(kp.exprs)
		text := texts[kind]
		if text == nil {
			continue
		}
		text.WriteString("]\n")
		exec, err := blobl.Parse(text.String())
		if err != nil {
			// Every rule compiled alone, so this is ours, not the author's.
			return nil, fmt.Errorf("compiling the %d %s rules together: %w", len(kp.blobRules), kind, err)
		}
		kp.exec = exec
	}
	return p, nil
}

// Native is how many of the program's rules run natively (the others run
// through Bloblang).
func (p *Program) Native() int {
	n := 0
	for _, kp := range p.kinds {
		for _, fn := range kp.native {
			if fn != nil {
				n++
			}
		}
	}
	return n
}

// eventWord finds the words event and this (the input as a whole).
var eventWord = regexp.MustCompile(`\b(?:event|this)\b`)

// eventFields lists the envelope fields the expressions name as
// event.<field> (or this.event.<field>); nil when any expression uses the
// event (or the whole input) otherwise: `event` alone, `event.keys()`,
// `this`, a quoted path. The extraction is textual and errs towards
// including: a name inside a string literal counts too.
func eventFields(exprs []string) map[string]bool {
	out := map[string]bool{}
	// field returns the identifier after a dot at x[i:] and whether a
	// method call follows it; ok false when no .identifier follows.
	field := func(x string, i int) (f string, call, ok bool) {
		if i >= len(x) || x[i] != '.' {
			return "", false, false
		}
		j := i + 1
		for j < len(x) && (x[j] == '_' || x[j] >= 'a' && x[j] <= 'z' || x[j] >= 'A' && x[j] <= 'Z' || j > i+1 && x[j] >= '0' && x[j] <= '9') {
			j++
		}
		if j == i+1 {
			return "", false, false
		}
		return x[i+1 : j], j < len(x) && x[j] == '(', true
	}
	for _, x := range exprs {
		for _, m := range eventWord.FindAllStringIndex(x, -1) {
			word := x[m[0]:m[1]]
			if m[0] > 0 && x[m[0]-1] == '.' && !(word == "event" && m[0] >= 5 && x[m[0]-5:m[0]] == "this.") {
				continue // a field named event or this of something else
			}
			f, call, ok := field(x, m[1])
			if !ok || call {
				return nil // the event (or input) as a whole, or a method on it
			}
			switch {
			case word == "event":
				out[f] = true
			case f != "event" && f != "features":
				return nil // this.<something else>
			}
			// this.event: the match of "event" itself names the field.
		}
	}
	return out
}

// featureRoot finds each use of the features (features, this.features) and
// what follows it.
var featureRoot = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.$])(?:this\.)?features\b`)

// featureName reads .section.name right after a use of the features.
var featureName = regexp.MustCompile(`^\.([A-Za-z_][A-Za-z0-9_]*)\.([A-Za-z_][A-Za-z0-9_]*)`)

// featureNeeds lists the features the expressions name as
// features.<section>.<name> (deeper paths and methods on that value
// included), section → names; all true when any uses the features, or the
// input, otherwise (`features` alone, a whole section, a method on one, a
// quoted path, `this` other than this.event. or this.features.): the
// program then gets every feature. The extraction is textual and errs
// towards including.
func featureNeeds(exprs []string) (needs map[string][]string, all bool) {
	seen := map[string]bool{}
	needs = map[string][]string{}
	for _, x := range exprs {
		for _, m := range featureRoot.FindAllStringIndex(x, -1) {
			rest := x[m[1]:]
			n := featureName.FindStringSubmatch(rest)
			if n == nil || len(n[0]) < len(rest) && rest[len(n[0])] == '(' {
				return nil, true
			}
			if k := n[1] + "." + n[2]; !seen[k] {
				seen[k] = true
				needs[n[1]] = append(needs[n[1]], n[2])
			}
		}
		for _, m := range eventWord.FindAllStringIndex(x, -1) {
			if x[m[0]:m[1]] != "this" || m[0] > 0 && x[m[0]-1] == '.' {
				continue
			}
			rest := x[m[1]:]
			if !strings.HasPrefix(rest, ".event.") && !strings.HasPrefix(rest, ".features.") {
				return nil, true
			}
		}
	}
	return needs, false
}

// compileOne compiles one rule's expression alone, the way it runs inside the
// combined program, and returns it without the catch.
func compileOne(r *Rule) (*bloblang.Executor, error) {
	if strings.TrimSpace(r.Expression) == "" {
		return nil, &CompileError{Rule: r.Name, Line: 1, Column: 1, Err: ErrEmptyExpression}
	}
	if line, col, err := checkBalanced(r.Expression); err != nil {
		return nil, &CompileError{Rule: r.Name, Line: line, Column: col, Err: err}
	}
	// The expression starts on line 2 of the mapping: its positions are the
	// mapping's minus one line.
	exec, err := blobl.Parse("root = (\n" + r.Expression + "\n)")
	if err != nil {
		ce := &CompileError{Rule: r.Name, Line: 1, Column: 1, Err: parseMessage(err)}
		var pe *bloblang.ParseError
		if errors.As(err, &pe) {
			ce.Line, ce.Column = pe.Line-1, pe.Column
			if lines := strings.Count(r.Expression, "\n") + 1; ce.Line > lines {
				// Past the end (an unfinished expression): point at its end.
				last := r.Expression[strings.LastIndexByte(r.Expression, '\n')+1:]
				ce.Line, ce.Column = lines, len([]rune(last))+1
			}
			if ce.Line < 1 {
				ce.Line, ce.Column = 1, 1
			}
		}
		return nil, ce
	}
	return exec, nil
}

// parseMessage is the parser's message without the rest of the input it
// quotes after "got:" (which would show our wrapping), on one line.
func parseMessage(err error) error {
	msg, _, _ := strings.Cut(err.Error(), "\n")
	msg = strings.TrimRight(msg, ": ")
	return errors.New(msg)
}

// checkBalanced refuses an expression whose brackets do not balance outside
// string literals and comments: one that closes more than it opens could
// close the parenthesis it is wrapped in and add statements of its own to the
// combined program.
func checkBalanced(expr string) (line, col int, err error) {
	var stack []rune
	type pos struct{ line, col int }
	var opened []pos
	rs := []rune(expr)
	line, col = 1, 0
	for i := 0; i < len(rs); i++ {
		c := rs[i]
		col++
		if c == '\n' {
			line, col = line+1, 0
			continue
		}
		switch c {
		case '#':
			for i+1 < len(rs) && rs[i+1] != '\n' {
				i++
			}
		case '"':
			if i+2 < len(rs) && rs[i+1] == '"' && rs[i+2] == '"' {
				// Triple-quoted: raw until the next """.
				startLine, startCol := line, col
				var closed bool
				i, line, col, closed = skipTripleQuoted(rs, i, line, col)
				if !closed {
					return startLine, startCol, errors.New("unterminated \"\"\" string")
				}
				continue
			}
			startLine, startCol := line, col
			closed := false
			for i+1 < len(rs) {
				i++
				col++
				if rs[i] == '\\' {
					i++
					col++
					continue
				}
				if rs[i] == '\n' {
					break
				}
				if rs[i] == '"' {
					closed = true
					break
				}
			}
			if !closed {
				return startLine, startCol, errors.New("unterminated string")
			}
		case '(', '[', '{':
			stack = append(stack, c)
			opened = append(opened, pos{line, col})
		case ')', ']', '}':
			want := map[rune]rune{')': '(', ']': '[', '}': '{'}[c]
			if len(stack) == 0 || stack[len(stack)-1] != want {
				return line, col, fmt.Errorf("unexpected %q", c)
			}
			stack, opened = stack[:len(stack)-1], opened[:len(opened)-1]
		}
	}
	if len(stack) > 0 {
		p := opened[len(opened)-1]
		return p.line, p.col, fmt.Errorf("%q is never closed", stack[len(stack)-1])
	}
	return 0, 0, nil
}

// skipTripleQuoted steps past a """ string whose opening quote is rs[i],
// at line and col, to its closing quote: it returns where that is and
// whether there was one.
func skipTripleQuoted(rs []rune, i, line, col int) (int, int, int, bool) {
	i += 2
	col += 2
	for i+1 < len(rs) {
		i++
		col++
		if rs[i] == '\n' {
			line, col = line+1, 0
			continue
		}
		if rs[i] == '"' && i+2 < len(rs) && rs[i+1] == '"' && rs[i+2] == '"' {
			i += 2
			col += 2
			return i, line, col, true
		}
	}
	return i, line, col, false
}

// featurePath finds features.<a>.<b>… in an expression (with or without
// this.); a segment followed by "(" is a method call, not part of the path.
var featurePath = regexp.MustCompile(`(?:^|[^A-Za-z0-9_.])(?:this\.)?features((?:\.[A-Za-z_][A-Za-z0-9_]*)+)(\()?`)

// featureReads lists the features.* paths an expression names, once each, in
// the order they first appear. The extraction is textual: a path inside a
// string literal counts too, which at worst reports one value too many.
func featureReads(expr string) []readPath {
	var out []readPath
	seen := map[string]bool{}
	for _, m := range featurePath.FindAllStringSubmatch(expr, -1) {
		segs := strings.Split(strings.TrimPrefix(m[1], "."), ".")
		if m[2] == "(" {
			segs = segs[:len(segs)-1]
		}
		if len(segs) == 0 {
			continue
		}
		key := "features." + strings.Join(segs, ".")
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, readPath{key: key, segs: segs})
	}
	return out
}

// Len is how many rules the program holds.
func (p *Program) Len() int {
	n := 0
	for _, kp := range p.kinds {
		n += len(kp.rules)
	}
	return n
}

package rules

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/speculapro/speculapro/internal/event"
)

// What a test case expects.
const (
	ExpectHit   = "hit"
	ExpectNoHit = "no_hit"
)

// Definition is one rule as a rule file defines it: the rule, where it is
// written, and its test cases.
type Definition struct {
	Rule  Rule
	File  string
	Line  int // of the rule's entry in File
	Tests []TestCase

	expr exprPlacement
}

// TestCase is one of a rule's tests: an event and its features, and whether
// the rule must fire on them.
type TestCase struct {
	Name     string
	Line     int
	Event    *event.Envelope
	Features map[string]any
	Hit      bool // expect: hit (true) or no_hit (false)
}

// exprPlacement maps a line:column inside an expression to one in its file.
type exprPlacement struct {
	line, col int  // where the scalar starts (for a block scalar: its | or >)
	block     bool // | or >: the text starts on the next line, indented
	indent    int  // a block scalar's indentation
	quoted    bool // '…' or "…": the text starts one column after line:col
}

// Position returns the file position of line:col (1-based) of the rule's
// expression. Exact for block (|) and single-line scalars; for a folded (>)
// or multi-line flow scalar, YAML joins lines and the line is approximate.
func (d *Definition) Position(line, col int) (int, int) {
	p := d.expr
	if p.block {
		return p.line + line, p.indent + col
	}
	if line > 1 {
		return p.line + line - 1, col
	}
	if p.quoted {
		col++
	}
	return p.line, p.col + col - 1
}

// The file's shape, decoded strictly: an unknown field is an error with its
// line.
type fileDoc struct {
	Rules []ruleDoc `yaml:"rules"`
}

type ruleDoc struct {
	Name        string     `yaml:"name"`
	Description string     `yaml:"description"`
	AppliesTo   string     `yaml:"applies_to"`
	Severity    string     `yaml:"severity"`
	Action      string     `yaml:"action"`
	Alert       *bool      `yaml:"alert"`
	Mode        string     `yaml:"mode"`
	Score       scalarText `yaml:"score"`
	Enabled     *bool      `yaml:"enabled"`
	Expression  yaml.Node  `yaml:"expression"`
	Tests       []testDoc  `yaml:"tests"`
}

type testDoc struct {
	Name     string    `yaml:"name"`
	Event    yaml.Node `yaml:"event"`
	Features yaml.Node `yaml:"features"`
	Expect   string    `yaml:"expect"`
}

// scalarText keeps a scalar's text as written, so a score of 12.50 stays
// the decimal it is and never passes through a float.
type scalarText struct {
	set  bool
	text string
}

func (s *scalarText) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a number", n.Line)
	}
	s.set, s.text = true, n.Value
	return nil
}

// ParseFiles reads, validates and compiles (each rule alone) every rule in
// paths. All problems are reported together, each as path:line:column: what;
// no Definition is returned unless every file is sound.
func ParseFiles(paths ...string) ([]Definition, error) {
	var defs []Definition
	var errs []error
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading rule file: %w", err))
			continue
		}
		d, err := Parse(path, data)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defs = append(defs, d...)
	}
	seen := map[string]*Definition{}
	for i := range defs {
		d := &defs[i]
		if first, ok := seen[d.Rule.Name]; ok {
			errs = append(errs, fmt.Errorf("%s:%d: rule %q: %w (first at %s:%d)", d.File, d.Line, d.Rule.Name, ErrDuplicateRuleName, first.File, first.Line))
			continue
		}
		seen[d.Rule.Name] = d
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return defs, nil
}

// Parse reads the rules of one file's content; name is the file's path, for
// positions in errors.
func Parse(name string, data []byte) ([]Definition, error) {
	var doc fileDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, yamlError(name, err)
	}
	// A second pass over the node tree for the line of each rule and test
	// (the strict decode above has already refused any unknown field).
	var tree yaml.Node
	if err := yaml.Unmarshal(data, &tree); err != nil {
		return nil, yamlError(name, err)
	}
	ruleNodes := sequenceItems(mappingValue(documentRoot(&tree), "rules"))
	if len(doc.Rules) == 0 {
		return nil, fmt.Errorf("%s: no rules (the file must hold `rules:` with at least one rule)", name)
	}
	lines := strings.Split(string(data), "\n")

	var defs []Definition
	var errs []error
	for i, rd := range doc.Rules {
		line := 0
		var testNodes []*yaml.Node
		if i < len(ruleNodes) {
			line = ruleNodes[i].Line
			testNodes = sequenceItems(mappingValue(ruleNodes[i], "tests"))
		}
		d, err := definition(name, line, lines, rd, testNodes)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		defs = append(defs, d)
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return defs, nil
}

func definition(file string, line int, lines []string, rd ruleDoc, testNodes []*yaml.Node) (Definition, error) {
	d := Definition{File: file, Line: line}
	r := &d.Rule
	r.Name, r.Description = rd.Name, strings.TrimSpace(rd.Description)
	r.AppliesTo = event.Kind(orDefault(rd.AppliesTo, string(event.KindTransaction)))
	r.Severity = orDefault(rd.Severity, "medium")
	r.Action = orDefault(rd.Action, "alert")
	r.Alert = rd.Alert == nil || *rd.Alert
	r.Mode = orDefault(rd.Mode, ModeLive)
	r.Enabled = rd.Enabled == nil || *rd.Enabled
	r.Score = "0"
	if rd.Score.set {
		r.Score = rd.Score.text
	}
	at := func(l int) string { return fmt.Sprintf("%s:%d", file, l) }

	ex := &rd.Expression
	if ex.Kind != 0 && ex.Kind != yaml.ScalarNode {
		return d, fmt.Errorf("%s: rule %q: expression must be text (use `expression: |`)", at(ex.Line), r.Name)
	}
	r.Expression = strings.TrimRight(ex.Value, "\n")
	d.expr = placement(ex, lines)
	if err := r.Validate(); err != nil {
		return d, fmt.Errorf("%s: %w", at(line), err)
	}
	if _, err := compileOne(r); err != nil {
		var ce *CompileError
		if errors.As(err, &ce) {
			fl, fc := d.Position(ce.Line, ce.Column)
			return d, fmt.Errorf("%s:%d:%d: rule %q: %v", file, fl, fc, r.Name, ce.Err)
		}
		return d, fmt.Errorf("%s: %w", at(line), err)
	}

	for i, td := range rd.Tests {
		tl := line
		if i < len(testNodes) {
			tl = testNodes[i].Line
		}
		tc, err := testCase(r, td, tl)
		if err != nil {
			return d, fmt.Errorf("%s: rule %q: test %q: %w", at(tl), r.Name, td.Name, err)
		}
		d.Tests = append(d.Tests, tc)
	}
	return d, nil
}

func testCase(r *Rule, td testDoc, line int) (TestCase, error) {
	tc := TestCase{Name: td.Name, Line: line}
	if strings.TrimSpace(td.Name) == "" {
		return tc, errors.New("name is empty")
	}
	switch td.Expect {
	case ExpectHit:
		tc.Hit = true
	case ExpectNoHit:
	default:
		return tc, fmt.Errorf("expect must be %s or %s", ExpectHit, ExpectNoHit)
	}
	ev, err := nodeValue(&td.Event, true)
	if err != nil {
		return tc, fmt.Errorf("event: %w", err)
	}
	evMap, _ := ev.(map[string]any)
	if evMap == nil {
		evMap = map[string]any{}
	}
	if _, ok := evMap["kind"]; !ok {
		evMap["kind"] = string(r.AppliesTo)
	}
	raw, err := json.Marshal(evMap)
	if err != nil {
		return tc, fmt.Errorf("event: %w", err)
	}
	jd := json.NewDecoder(bytes.NewReader(raw))
	jd.DisallowUnknownFields()
	var env event.Envelope
	if err := jd.Decode(&env); err != nil {
		return tc, fmt.Errorf("event is not an envelope: %w", err)
	}
	tc.Event = &env

	f, err := nodeValue(&td.Features, false)
	if err != nil {
		return tc, fmt.Errorf("features: %w", err)
	}
	switch f := f.(type) {
	case nil:
	case map[string]any:
		tc.Features = f
	default:
		return tc, errors.New("features must be a mapping")
	}
	return tc, nil
}

// nodeValue turns YAML into the values the stream gives a rule: integers as
// int64, other numbers as json.Number (never a float), so a test compares as
// production does. In an event (envelope true) amount stays the text written.
func nodeValue(n *yaml.Node, envelope bool) (any, error) {
	switch n.Kind {
	case 0:
		return nil, nil
	case yaml.DocumentNode:
		if len(n.Content) == 0 {
			return nil, nil
		}
		return nodeValue(n.Content[0], envelope)
	case yaml.AliasNode:
		return nodeValue(n.Alias, envelope)
	case yaml.SequenceNode:
		out := make([]any, 0, len(n.Content))
		for _, c := range n.Content {
			v, err := nodeValue(c, false)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	case yaml.MappingNode:
		out := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			if envelope && k.Value == "amount" && v.Kind == yaml.ScalarNode {
				out[k.Value] = v.Value
				continue
			}
			val, err := nodeValue(v, false)
			if err != nil {
				return nil, err
			}
			out[k.Value] = val
		}
		return out, nil
	}
	switch n.ShortTag() {
	case "!!null":
		return nil, nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, fmt.Errorf("line %d: %w", n.Line, err)
		}
		return b, nil
	case "!!int":
		if i, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64); err == nil {
			return i, nil
		}
		return json.Number(n.Value), nil
	case "!!float":
		if _, err := strconv.ParseFloat(n.Value, 64); err != nil {
			return nil, fmt.Errorf("line %d: %q is not a number a rule can compare", n.Line, n.Value)
		}
		return json.Number(n.Value), nil
	}
	return n.Value, nil
}

func placement(n *yaml.Node, lines []string) exprPlacement {
	p := exprPlacement{line: n.Line, col: n.Column}
	switch n.Style {
	case yaml.LiteralStyle, yaml.FoldedStyle:
		p.block = true
		for l := n.Line; l < len(lines); l++ { // lines[l] is file line l+1
			if s := lines[l]; strings.TrimSpace(s) != "" {
				p.indent = len(s) - len(strings.TrimLeft(s, " "))
				break
			}
		}
	case yaml.SingleQuotedStyle, yaml.DoubleQuotedStyle:
		p.quoted = true
	}
	return p
}

func documentRoot(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		return n.Content[0]
	}
	return n
}

func mappingValue(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}

func sequenceItems(n *yaml.Node) []*yaml.Node {
	if n == nil || n.Kind != yaml.SequenceNode {
		return nil
	}
	return n.Content
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

var (
	yamlLine     = regexp.MustCompile(`^\s*(?:yaml: )?line (\d+): (.*)$`)
	yamlTypeName = strings.NewReplacer("rules.fileDoc", "a rule file", "rules.ruleDoc", "a rule", "rules.testDoc", "a test")
)

// yamlError puts the file name in front of each of yaml's "line N: …" so
// every problem reads path:N: ….
func yamlError(name string, err error) error {
	var te *yaml.TypeError
	var msgs []string
	if errors.As(err, &te) {
		msgs = te.Errors
	} else {
		msgs = []string{err.Error()}
	}
	var errs []error
	for _, m := range msgs {
		m = yamlTypeName.Replace(m)
		m = strings.ReplaceAll(m, " in type ", " in ")
		if sm := yamlLine.FindStringSubmatch(m); sm != nil {
			errs = append(errs, fmt.Errorf("%s:%s: %s", name, sm[1], sm[2]))
			continue
		}
		errs = append(errs, fmt.Errorf("%s: %s", name, strings.TrimPrefix(m, "yaml: ")))
	}
	return errors.Join(errs...)
}

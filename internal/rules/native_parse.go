package rules

import (
	"errors"
	"strconv"
	"strings"
)

// The native evaluator's parser: the subset of Bloblang that rules are
// written in (&&, ||, !, comparisons, + - * / %, |, literals, event.* and
// features.* paths, a few methods), parsed into the tree Bloblang's own
// parser builds for it, so the same operators combine in the same order
// (Bloblang has four levels, each left to right: * / % |, then + -, then
// the comparisons, then && and || together). An expression outside the
// subset is not an error: its rule runs through Bloblang, as every rule did
// before. Only expressions Bloblang compiled reach this parser, so it need
// not reject what Bloblang rejects, only never read an accepted expression
// differently.

// errNotNative: the expression is outside the native subset.
var errNotNative = errors.New("outside the native subset")

type nodeKind uint8

const (
	nLit      nodeKind = iota
	nEvent             // event.<segs…>
	nFeat              // features.<segs…>
	nGet               // kid.<segs…>: a path into a computed value
	nArith             // + - * / %
	nCmp               // == != > >= < <=
	nAnd               // &&
	nOr                // ||
	nCoalesce          // |
	nNot               // !kid
	nMethod            // kid.method(arg)
)

type node struct {
	kind   nodeKind
	op     string
	lit    val
	segs   []string
	method string
	kids   []*node
}

type tokKind uint8

const (
	tEOF tokKind = iota
	tNum
	tStr
	tIdent
	tOp
	tLParen
	tRParen
	tDot
	tComma
	tNot
)

type token struct {
	kind tokKind
	text string
	lit  val
	// glued: no space, line break or comment between this token and the
	// previous one (a method's "(" and a path's "." must be glued).
	glued bool
}

// lex splits an expression into tokens; strings and numbers are read as
// Bloblang's literal parsers read them.
func lex(s string) ([]token, error) {
	var out []token
	glued := true
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
			glued = false
			continue
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
			glued = false
			continue
		}
		t := token{glued: glued}
		glued = true
		switch {
		case c >= '0' && c <= '9':
			j, err := lexNumber(s, i, &t)
			if err != nil {
				return nil, err
			}
			i = j
		case c == '"':
			j, err := lexString(s, i, &t)
			if err != nil {
				return nil, err
			}
			i = j
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			t.kind, t.text = tIdent, s[i:j]
			i = j
		case c == '(':
			t.kind = tLParen
			i++
		case c == ')':
			t.kind = tRParen
			i++
		case c == '.':
			t.kind = tDot
			i++
		case c == ',':
			t.kind = tComma
			i++
		default:
			op := ""
			for _, o := range [...]string{"&&", "||", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", ">", "<", "|"} {
				if strings.HasPrefix(s[i:], o) {
					op = o
					break
				}
			}
			switch {
			case op != "":
				t.kind, t.text = tOp, op
				i += len(op)
			case c == '!':
				t.kind = tNot
				i++
			default:
				return nil, errNotNative
			}
		}
		out = append(out, t)
	}
	return append(out, token{kind: tEOF}), nil
}

// lexNumber reads the number at s[i:] into t, as Bloblang's literal
// parser reads it, and returns where it ends.
func lexNumber(s string, i int, t *token) (int, error) {
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j+1 < len(s) && s[j] == '.' && s[j+1] >= '0' && s[j+1] <= '9' {
		j++
		for j < len(s) && s[j] >= '0' && s[j] <= '9' {
			j++
		}
		f, err := strconv.ParseFloat(s[i:j], 64)
		if err != nil {
			return 0, errNotNative
		}
		t.lit = val{k: vFloat, f: f}
	} else {
		n, err := strconv.ParseInt(s[i:j], 10, 64)
		if err != nil {
			return 0, errNotNative
		}
		t.lit = val{k: vInt, i: n}
	}
	t.kind, t.text = tNum, s[i:j]
	return j, nil
}

// lexString reads the string literal at s[i:] (quoted, or raw between
// triple quotes) into t and returns where it ends.
func lexString(s string, i int, t *token) (int, error) {
	if strings.HasPrefix(s[i:], `"""`) {
		end := strings.Index(s[i+3:], `"""`)
		if end < 0 {
			return 0, errNotNative
		}
		t.kind, t.lit = tStr, val{k: vStr, s: s[i+3 : i+3+end]}
		return i + 3 + end + 3, nil
	}
	j, escaped := i+1, false
	for ; j < len(s); j++ {
		if s[j] == '"' && !escaped {
			break
		}
		if s[j] == '\\' {
			escaped = !escaped
		} else {
			escaped = false
		}
	}
	if j >= len(s) {
		return 0, errNotNative
	}
	u, err := strconv.Unquote(s[i : j+1])
	if err != nil {
		return 0, errNotNative
	}
	t.kind, t.lit = tStr, val{k: vStr, s: u}
	return j + 1, nil
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

type parser struct {
	toks []token
	pos  int
}

func (p *parser) peek() token { return p.toks[p.pos] }
func (p *parser) next() token {
	t := p.toks[p.pos]
	if p.pos < len(p.toks)-1 { // tEOF stays
		p.pos++
	}
	return t
}

// parseNative parses expr into the tree Bloblang builds for it, or
// errNotNative.
func parseNative(expr string) (*node, error) {
	toks, err := lex(expr)
	if err != nil {
		return nil, err
	}
	p := &parser{toks: toks}
	return p.exprThen(tEOF)
}

// exprThen reads an expression that the token end must follow, and
// consumes end.
func (p *parser) exprThen(end tokKind) (*node, error) {
	n, err := p.expr()
	if err != nil {
		return nil, err
	}
	if p.next().kind != end {
		return nil, errNotNative
	}
	return n, nil
}

// expr reads operands and operators and combines them in Bloblang's four
// passes (NewArithmeticExpression).
func (p *parser) expr() (*node, error) {
	var operands []*node
	var ops []string
	for {
		n, err := p.operand()
		if err != nil {
			return nil, err
		}
		operands = append(operands, n)
		if t := p.peek(); t.kind != tOp {
			break
		}
		ops = append(ops, p.next().text)
	}
	for _, level := range [...]string{"*/%|", "+-", "=!<>", "&|"} {
		fns, rest := []*node{operands[0]}, []string{}
		for i, op := range ops {
			if !opAtLevel(op, level) {
				fns, rest = append(fns, operands[i+1]), append(rest, op)
				continue
			}
			fns[len(fns)-1] = binary(op, fns[len(fns)-1], operands[i+1])
		}
		operands, ops = fns, rest
	}
	return operands[0], nil
}

// opAtLevel says whether op combines in the pass named by level.
func opAtLevel(op, level string) bool {
	switch level {
	case "*/%|":
		return op == "*" || op == "/" || op == "%" || op == "|"
	case "+-":
		return op == "+" || op == "-"
	case "=!<>":
		return op == "==" || op == "!=" || op == ">" || op == ">=" || op == "<" || op == "<="
	}
	return op == "&&" || op == "||"
}

func binary(op string, l, r *node) *node {
	kids := []*node{l, r}
	switch op {
	case "&&":
		return &node{kind: nAnd, op: op, kids: kids}
	case "||":
		return &node{kind: nOr, op: op, kids: kids}
	case "|":
		return &node{kind: nCoalesce, op: op, kids: kids}
	case "+", "-", "*", "/", "%":
		return &node{kind: nArith, op: op, kids: kids}
	}
	return &node{kind: nCmp, op: op, kids: kids}
}

// operand is an optional minus (Bloblang reads -x as 0 - x), an optional !
// and a term with its tails (! applies to the whole chain).
func (p *parser) operand() (*node, error) {
	neg := false
	if t := p.peek(); t.kind == tOp && t.text == "-" {
		p.next()
		neg = true
	}
	not := false
	if p.peek().kind == tNot {
		p.next()
		not = true
	}
	n, err := p.term()
	if err != nil {
		return nil, err
	}
	if n, err = p.tails(n); err != nil {
		return nil, err
	}
	if not {
		n = &node{kind: nNot, kids: []*node{n}}
	}
	if neg {
		n = &node{kind: nArith, op: "-", kids: []*node{{kind: nLit, lit: val{k: vInt}}, n}}
	}
	return n, nil
}

func (p *parser) term() (*node, error) {
	t := p.next()
	if t.kind == tOp && t.text == "-" && p.peek().kind == tNum && p.peek().glued {
		// A minus glued to a number, where an operand's minus was taken
		// already (--1, !-1): the number literal's own sign.
		n := p.next().lit
		n.i, n.f = -n.i, -n.f
		return &node{kind: nLit, lit: n}, nil
	}
	switch t.kind {
	case tNum, tStr:
		return &node{kind: nLit, lit: t.lit}, nil
	case tLParen:
		return p.exprThen(tRParen)
	case tIdent:
		switch t.text {
		case "true", "false":
			return &node{kind: nLit, lit: val{k: vBool, b: t.text == "true"}}, nil
		case "null":
			return &node{kind: nLit, lit: val{k: vNull}}, nil
		case "event", "features":
			return p.root(t.text)
		case "this":
			if !p.gluedDot() || p.toks[p.pos+1].kind != tIdent {
				return nil, errNotNative
			}
			p.next()
			if r := p.next().text; r == "event" || r == "features" {
				return p.root(r)
			}
		}
	}
	return nil, errNotNative
}

// gluedDot says whether a "." glued to the previous token comes next.
func (p *parser) gluedDot() bool {
	t := p.peek()
	return t.kind == tDot && t.glued
}

// root reads the path after event or features (at least one segment: the
// whole event or all the features are left to Bloblang).
func (p *parser) root(name string) (*node, error) {
	n := &node{kind: nEvent}
	if name == "features" {
		n.kind = nFeat
	}
	for p.gluedDot() && p.toks[p.pos+1].kind == tIdent && p.toks[p.pos+2].kind != tLParen {
		p.next()
		n.segs = append(n.segs, p.next().text)
	}
	if len(n.segs) == 0 {
		return nil, errNotNative
	}
	return n, nil
}

// nativeMethods are the methods the native evaluator runs, with how many
// arguments each takes.
var nativeMethods = map[string]int{"floor": 0, "ceil": 0, "round": 0, "or": 1, "catch": 1}

// tails reads .field and .method(…) after a term.
func (p *parser) tails(n *node) (*node, error) {
	for p.gluedDot() {
		p.next()
		t := p.next()
		if t.kind != tIdent && t.kind != tNum {
			return nil, errNotNative
		}
		if t.kind == tNum && strings.Contains(t.text, ".") {
			return nil, errNotNative // x.1.2: two segments Bloblang reads apart
		}
		if open := p.peek(); open.kind == tLParen && open.glued {
			args, ok := nativeMethods[t.text]
			if !ok {
				return nil, errNotNative
			}
			p.next()
			m := &node{kind: nMethod, method: t.text, kids: []*node{n}}
			if args == 1 {
				arg, err := p.exprThen(tRParen)
				if err != nil {
					return nil, err
				}
				m.kids = append(m.kids, arg)
			} else if p.next().kind != tRParen {
				return nil, errNotNative
			}
			n = m
			continue
		}
		if n.kind == nGet {
			n.segs = append(n.segs, t.text)
		} else {
			n = &node{kind: nGet, segs: []string{t.text}, kids: []*node{n}}
		}
	}
	return n, nil
}

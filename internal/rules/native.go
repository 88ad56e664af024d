package rules

import (
	"encoding/json"
	"errors"
	"math"
	"strconv"

	"github.com/speculapro/speculapro/internal/event"
)

// The native evaluator runs the common shape of rules as Go closures over
// the event and its features, with Bloblang's semantics: its number
// degradation (int64 against int64, anything with a float as float64, a
// json.Number read as ISanitize reads it), its comparisons (== between
// different types is false, < between them an error), its truthiness for
// && and || (a number is true unless zero), and its null handling (| takes
// the right side on null or on an error). Interpreting the Bloblang tree
// per event, and building the map it reads, is most of the cost of rules
// run through Bloblang (docs/design/performance.md, "The native rule
// evaluator").
//
// A closure either decides (a value) or fails with errBlob (Bloblang fails
// there too: the rule is then run through Bloblang for its error, so the
// message and the count are Bloblang's own) or errUnsup (a value the native
// evaluator does not model, such as two objects compared: Bloblang decides
// the rule). The differential tests (native_test.go) hold the two equal.

var (
	errBlob  = errors.New("the expression fails here")
	errUnsup = errors.New("not decided natively")
)

// vkind is the kind of a native value.
type vkind uint8

const (
	vNull vkind = iota
	vBool
	vInt
	vFloat
	vStr
	// vNum is a json.Number (amounts, sums): s is its text; nk and i are
	// what ISanitize makes of it (int64 if it parses as one, else float64,
	// else the string); f (when fok) is its ParseFloat reading, which
	// IGetNumber uses and ISanitize's float64 is.
	vNum
	vObj // a map[string]any or []any, in o
	vSec // a features section that is present, its map not built
)

type val struct {
	k, nk vkind
	b     bool
	fok   bool
	i     int64
	f     float64
	s     string
	o     any
}

func numberVal(s string) val {
	v := val{k: vNum, s: s}
	v.f, v.fok = parseFloat(s)
	if i, ok := parseInt(s); ok {
		v.nk, v.i = vInt, i
	} else if v.fok {
		v.nk = vFloat
	} else {
		v.nk = vStr
	}
	return v
}

// parseInt is strconv.ParseInt(s, 10, 64) without the error it builds
// (an allocation) for what it refuses: most amounts and sums have a
// fraction, which only ParseFloat reads.
func parseInt(s string) (int64, bool) {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && !(i == 0 && (c == '+' || c == '-')) {
			return 0, false
		}
	}
	i, err := strconv.ParseInt(s, 10, 64)
	return i, err == nil
}

func parseFloat(s string) (float64, bool) {
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// fromAny is a value as Bloblang receives it (from a feature, metadata or
// a path into them).
func fromAny(x any) (val, error) {
	switch t := x.(type) {
	case nil:
		return val{}, nil
	case bool:
		return val{k: vBool, b: t}, nil
	case int64:
		return val{k: vInt, i: t}, nil
	case float64:
		return val{k: vFloat, f: t}, nil
	case string:
		return val{k: vStr, s: t}, nil
	case json.Number:
		return numberVal(string(t)), nil
	case map[string]any, []any:
		return val{k: vObj, o: x}, nil
	}
	return val{}, errUnsup
}

// sanitized is ISanitize's view of v.
func (v val) sanitized() val {
	if v.k != vNum {
		return v
	}
	switch v.nk {
	case vInt:
		return val{k: vInt, i: v.i}
	case vFloat:
		return val{k: vFloat, f: v.f}
	}
	return val{k: vStr, s: v.s}
}

// number is IGetNumber.
func (v val) number() (float64, bool) {
	switch v.k {
	case vInt:
		return float64(v.i), true
	case vFloat:
		return v.f, true
	case vNum:
		return v.f, v.fok
	}
	return 0, false
}

// integer is IGetInt.
func (v val) integer() (int64, bool) {
	switch s := v.sanitized(); s.k {
	case vInt:
		return s.i, true
	case vFloat:
		return int64(s.f), true
	}
	return 0, false
}

// boolean is IGetBool.
func (v val) boolean() (bool, bool) {
	switch v.k {
	case vBool:
		return v.b, true
	case vInt:
		return v.i != 0, true
	case vFloat:
		return v.f != 0, true
	case vNum:
		return v.s != "0", true
	}
	return false, false
}

// typeName is typeName of the value Bloblang would have returned.
func (v val) typeName() string {
	switch v.k {
	case vNull:
		return "null"
	case vBool:
		return "bool"
	case vStr:
		return "string"
	case vSec:
		return "object"
	case vObj:
		if _, ok := v.o.([]any); ok {
			return "array"
		}
		return "object"
	}
	return "number"
}

// numPair is numberDegradationFunc's choice for l and r: both as float64
// when either is a float, else both as int64; ok false on a type mismatch.
func numPair(l, r val) (lf, rf float64, li, ri int64, isFloat, ok bool) {
	l, r = l.sanitized(), r.sanitized()
	switch {
	case l.k == vFloat:
		rf, ok = r.number()
		return l.f, rf, 0, 0, true, ok
	case r.k == vFloat:
		lf, ok = l.number()
		return lf, r.f, 0, 0, true, ok
	case l.k == vInt:
		ri, ok = r.integer()
		return 0, 0, l.i, ri, false, ok
	case r.k == vInt:
		li, ok = l.integer()
		return 0, 0, li, r.i, false, ok
	}
	return 0, 0, 0, 0, false, false
}

// opcode is an operator, numbered once at compile time.
type opcode uint8

const (
	opEq opcode = iota
	opNe
	opGt
	opGe
	opLt
	opLe
	opAdd
	opSub
	opMul
	opDiv
	opMod
)

var opcodes = map[string]opcode{"==": opEq, "!=": opNe, ">": opGt, ">=": opGe, "<": opLt, "<=": opLe,
	"+": opAdd, "-": opSub, "*": opMul, "/": opDiv, "%": opMod}

func ordered[T int64 | float64 | string](op opcode, l, r T) bool {
	switch op {
	case opEq:
		return l == r
	case opNe:
		return l != r
	case opGt:
		return l > r
	case opGe:
		return l >= r
	case opLt:
		return l < r
	}
	return l <= r
}

// compare is compareOp.
func compare(op opcode, l, r val) (bool, error) {
	eqOp := op == opEq || op == opNe
	switch ls := l.sanitized(); ls.k {
	case vStr:
		if r.k == vStr {
			return ordered(op, ls.s, r.s), nil
		}
		if !eqOp {
			return false, errBlob
		}
		rs := r.sanitized()
		return (rs.k == vStr && rs.s == ls.s) == (op == opEq), nil
	case vInt, vFloat:
		lf, rf, li, ri, isFloat, ok := numPair(l, r)
		switch {
		case !ok && eqOp:
			return op == opNe, nil
		case !ok:
			return false, errBlob
		case isFloat:
			return ordered(op, lf, rf), nil
		}
		return ordered(op, li, ri), nil
	case vBool:
		if !eqOp {
			return false, errBlob
		}
		rb, ok := r.boolean()
		if !ok {
			return op == opNe, nil
		}
		return (ls.b == rb) == (op == opEq), nil
	}
	// null, an object or an array: ICompare.
	if !eqOp {
		return false, errBlob
	}
	var eq bool
	switch {
	case l.k == vNull:
		eq = r.k == vNull
	case r.k == vObj || r.k == vSec:
		return false, errUnsup // a deep comparison: Bloblang's
	}
	return eq == (op == opEq), nil
}

// arith is the arithmetic operators.
func arith(op opcode, l, r val) (val, error) {
	switch op {
	case opDiv:
		a, ok1 := l.number()
		b, ok2 := r.number()
		if !ok1 || !ok2 || b == 0 {
			return val{}, errBlob
		}
		return val{k: vFloat, f: a / b}, nil
	case opMod:
		a, ok1 := l.integer()
		b, ok2 := r.integer()
		if !ok1 || !ok2 || b == 0 {
			return val{}, errBlob
		}
		return val{k: vInt, i: a % b}, nil
	case opAdd:
		switch l.k {
		case vInt, vFloat, vNum:
		case vStr:
			if r.k != vStr {
				return val{}, errBlob
			}
			return val{k: vStr, s: l.s + r.s}, nil
		default:
			return val{}, errBlob
		}
	}
	lf, rf, li, ri, isFloat, ok := numPair(l, r)
	if !ok {
		return val{}, errBlob
	}
	if isFloat {
		switch op {
		case opAdd:
			return val{k: vFloat, f: lf + rf}, nil
		case opSub:
			return val{k: vFloat, f: lf - rf}, nil
		}
		return val{k: vFloat, f: lf * rf}, nil
	}
	switch op {
	case opAdd:
		return val{k: vInt, i: li + ri}, nil
	case opSub:
		return val{k: vInt, i: li - ri}, nil
	}
	return val{k: vInt, i: li * ri}, nil
}

// rounding is floor, ceil and round (numberMethod): an int64 when the
// result is one (IToInt), else the float.
func rounding(method string, v val) (val, error) {
	var f float64
	switch s := v.sanitized(); s.k {
	case vInt:
		return s, nil
	case vFloat:
		f = s.f
	default:
		return val{}, errBlob
	}
	switch method {
	case "floor":
		f = math.Floor(f)
	case "ceil":
		f = math.Ceil(f)
	default:
		f = math.Round(f)
	}
	if i, ok := floatToInt(f); ok {
		return val{k: vInt, i: i}, nil
	}
	return val{k: vFloat, f: f}, nil
}

// floatToInt is value.IToInt for a float64.
func floatToInt(t float64) (int64, bool) {
	const maxInt = int64(^uint64(0) >> 1)
	const minInt = ^maxInt
	if math.IsInf(t, 0) || math.IsNaN(t) || t > float64(maxInt) || t < float64(minInt) {
		return 0, false
	}
	if t-float64(int64(t)) != 0 {
		return 0, false
	}
	return int64(t), true
}

// descend follows segs into x as a Bloblang path does (gabs): maps by key,
// arrays by index, anything else (or a missing key) null.
func descend(x any, segs []string) any {
	for _, s := range segs {
		switch t := x.(type) {
		case map[string]any:
			v, ok := t[s]
			if !ok {
				return nil
			}
			x = v
		case []any:
			i, err := strconv.Atoi(s)
			if err != nil || i < 0 || i >= len(t) {
				return nil
			}
			x = t[i]
		default:
			return nil
		}
	}
	return x
}

// evalCtx is one event's evaluation: the event, its features, and what
// the rules read of them so far (read once per event, whichever rule asks
// first).
type evalCtx struct {
	env    *event.Envelope
	f      Features
	slots  []featSlot
	amount val
	gotAmt bool
	comp   [len(compositeFields)]struct {
		got bool
		v   any
	}
}

type featSlot struct {
	got bool
	raw any
	v   val
	err error
}

// compositeFields are the envelope fields whose values are objects, built
// (metadata decoded) at most once per event, when a rule reads them.
var compositeFields = [...]string{"counterparty", "metadata", "decision", "attributes"}

func (c *evalCtx) reset(env *event.Envelope, f Features, slots int) {
	c.env, c.f, c.gotAmt = env, f, false
	c.comp = [len(compositeFields)]struct {
		got bool
		v   any
	}{}
	if cap(c.slots) < slots {
		c.slots = make([]featSlot, slots)
	}
	c.slots = c.slots[:slots]
	clear(c.slots)
}

// feature is the raw value of slot i, section.name.
func (c *evalCtx) feature(i int, sec, name string) *featSlot {
	s := &c.slots[i]
	if !s.got {
		s.got = true
		s.raw = c.f.Feature(sec, name)
		s.v, s.err = fromAny(s.raw)
	}
	return s
}

// slotTable numbers the features a program's rules read, section and name.
type slotTable struct {
	index map[[2]string]int
}

func (t *slotTable) slot(sec, name string) int {
	if t.index == nil {
		t.index = map[[2]string]int{}
	}
	k := [2]string{sec, name}
	i, ok := t.index[k]
	if !ok {
		i = len(t.index)
		t.index[k] = i
	}
	return i
}

// evalFn is a compiled native expression.
type evalFn func(c *evalCtx) (val, error)

// both evaluates a binary operator's operands, left first (an error
// there leaves the right one unevaluated, as in Bloblang).
func both(c *evalCtx, l, r evalFn) (lv, rv val, err error) {
	if lv, err = l(c); err == nil {
		rv, err = r(c)
	}
	return lv, rv, err
}

// compileNative compiles expr natively, or returns errNotNative.
func compileNative(expr string, slots *slotTable) (evalFn, error) {
	n, err := parseNative(expr)
	if err != nil {
		return nil, err
	}
	return compileNode(n, slots)
}

func lit(v val) evalFn { return func(*evalCtx) (val, error) { return v, nil } }

func compileNode(n *node, slots *slotTable) (evalFn, error) {
	var kids []evalFn
	for _, k := range n.kids {
		fn, err := compileNode(k, slots)
		if err != nil {
			return nil, err
		}
		kids = append(kids, fn)
	}
	literal := func(i int) (val, bool) {
		if n.kids[i].kind == nLit {
			return n.kids[i].lit, true
		}
		return val{}, false
	}
	switch n.kind {
	case nLit:
		return lit(n.lit), nil
	case nEvent:
		return eventPath(n.segs), nil
	case nFeat:
		return featureFn(n.segs, slots), nil
	case nGet:
		kid, segs := kids[0], n.segs
		return func(c *evalCtx) (val, error) {
			v, err := kid(c)
			if err != nil {
				return val{}, err
			}
			switch v.k {
			case vObj:
				return fromAny(descend(v.o, segs))
			case vSec:
				return val{}, errUnsup
			}
			return val{}, nil
		}, nil
	case nArith:
		op, l, r := opcodes[n.op], kids[0], kids[1]
		if lv, ok := literal(0); ok {
			if rv, ok := literal(1); ok {
				if v, err := arith(op, lv, rv); err == nil {
					n.kind, n.lit, n.kids = nLit, v, nil // folded, as Bloblang folds literals
					return lit(v), nil
				}
			}
		}
		return func(c *evalCtx) (val, error) {
			lv, rv, err := both(c, l, r)
			if err != nil {
				return val{}, err
			}
			return arith(op, lv, rv)
		}, nil
	case nCmp:
		return compileCompare(n, kids), nil
	case nAnd, nOr:
		l, r, and := kids[0], kids[1], n.kind == nAnd
		return func(c *evalCtx) (val, error) {
			lv, err := l(c)
			if err != nil {
				return val{}, err
			}
			b, ok := lv.boolean()
			if !ok {
				return val{}, errBlob
			}
			if b != and {
				return val{k: vBool, b: b}, nil
			}
			rv, err := r(c)
			if err != nil {
				return val{}, err
			}
			if b, ok = rv.boolean(); !ok {
				return val{}, errBlob
			}
			return val{k: vBool, b: b}, nil
		}, nil
	case nCoalesce:
		l, r := kids[0], kids[1]
		return func(c *evalCtx) (val, error) {
			lv, err := l(c)
			if err == errUnsup {
				return val{}, err
			}
			if err == nil && lv.k != vNull {
				return lv, nil
			}
			return r(c)
		}, nil
	case nNot:
		kid := kids[0]
		return func(c *evalCtx) (val, error) {
			v, err := kid(c)
			if err != nil {
				return val{}, err
			}
			if v.k != vBool {
				return val{}, errBlob
			}
			return val{k: vBool, b: !v.b}, nil
		}, nil
	case nMethod:
		return compileMethod(n, kids)
	}
	return nil, errNotNative
}

func compileMethod(n *node, kids []evalFn) (evalFn, error) {
	kid, method := kids[0], n.method
	switch method {
	case "floor", "ceil", "round":
		return func(c *evalCtx) (val, error) {
			v, err := kid(c)
			if err != nil {
				return val{}, err
			}
			return rounding(method, v)
		}, nil
	case "or":
		alt := kids[1]
		return func(c *evalCtx) (val, error) {
			v, err := kid(c)
			if err == errUnsup {
				return val{}, err
			}
			if err != nil || v.k == vNull {
				return alt(c)
			}
			return v, nil
		}, nil
	case "catch":
		// The fallback runs with the error as its context: only a
		// literal means the same natively.
		if n.kids[1].kind != nLit {
			return nil, errNotNative
		}
		alt := n.kids[1].lit
		return func(c *evalCtx) (val, error) {
			v, err := kid(c)
			if err == errUnsup {
				return val{}, err
			}
			if err != nil {
				return alt, nil
			}
			return v, nil
		}, nil
	}
	return nil, errNotNative
}

// compileCompare compiles a comparison, with the common shapes (an
// envelope string field or a feature against a literal) read without
// building values they do not need.
func compileCompare(n *node, kids []evalFn) evalFn {
	op, l, r := opcodes[n.op], kids[0], kids[1]
	if n.kids[1].kind == nLit {
		rv := n.kids[1].lit
		if ln := n.kids[0]; ln.kind == nEvent && len(ln.segs) == 1 && rv.k == vStr && stringField(ln.segs[0]) {
			name, rs := ln.segs[0], rv.s
			return func(c *evalCtx) (val, error) {
				s, ok := envelopeString(c.env, name)
				if !ok {
					// A field the envelope omits is null: == false, != true,
					// an order an error.
					if op == opEq || op == opNe {
						return val{k: vBool, b: op == opNe}, nil
					}
					return val{}, errBlob
				}
				return val{k: vBool, b: ordered(op, s, rs)}, nil
			}
		}
		if n.kids[0].kind == nLit {
			if b, err := compare(op, n.kids[0].lit, rv); err == nil {
				return lit(val{k: vBool, b: b})
			}
		}
	}
	return func(c *evalCtx) (val, error) {
		lv, rv, err := both(c, l, r)
		if err != nil {
			return val{}, err
		}
		b, err := compare(op, lv, rv)
		return val{k: vBool, b: b}, err
	}
}

// eventPath reads event.<segs…> as the input's event map holds it
// (envelopeInto).
func eventPath(segs []string) evalFn {
	name, rest := segs[0], segs[1:]
	for ci, cf := range compositeFields {
		if cf != name {
			continue
		}
		return func(c *evalCtx) (val, error) {
			slot := &c.comp[ci]
			if !slot.got {
				slot.got = true
				slot.v, _ = envelopeValue(c.env, name)
			}
			return fromAny(descend(slot.v, rest))
		}
	}
	if len(rest) > 0 {
		// A path into a string or number: null.
		return lit(val{})
	}
	switch {
	case name == "amount":
		return func(c *evalCtx) (val, error) {
			if !c.gotAmt {
				c.gotAmt = true
				c.amount = val{}
				if c.env.Amount != "" {
					c.amount = numberVal(c.env.Amount)
				}
			}
			return c.amount, nil
		}
	case name == "v":
		return func(c *evalCtx) (val, error) { return val{k: vInt, i: int64(c.env.V)}, nil }
	case stringField(name):
		return func(c *evalCtx) (val, error) {
			if s, ok := envelopeString(c.env, name); ok {
				return val{k: vStr, s: s}, nil
			}
			return val{}, nil
		}
	}
	return lit(val{}) // not an envelope field
}

// featureFn reads features.<section>[.<name>…].
func featureFn(segs []string, slots *slotTable) evalFn {
	sec := segs[0]
	if len(segs) == 1 {
		return func(c *evalCtx) (val, error) {
			if c.f.Has(sec) {
				return val{k: vSec}, nil
			}
			return val{}, nil
		}
	}
	name, rest, i := segs[1], segs[2:], slots.slot(segs[0], segs[1])
	if len(rest) == 0 {
		return func(c *evalCtx) (val, error) {
			s := c.feature(i, sec, name)
			return s.v, s.err
		}
	}
	return func(c *evalCtx) (val, error) {
		return fromAny(descend(c.feature(i, sec, name).raw, rest))
	}
}

package rules

import (
	"errors"

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

// amountVal is event.amount (a json.Number, null when omitted), read once
// per event.
func (c *evalCtx) amountVal() *val {
	if !c.gotAmt {
		c.gotAmt = true
		c.amount = val{}
		if c.env.Amount != "" {
			c.amount = numberVal(c.env.Amount)
		}
	}
	return &c.amount
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
func compileNative(expr string, slots *slotTable) (*compiled, error) {
	n, err := parseNative(expr)
	if err != nil {
		return nil, err
	}
	return compileNode(n, slots)
}

func lit(v val) evalFn { return func(*evalCtx) (val, error) { return v, nil } }

// valueNode is a node only its value form computes.
func valueNode(fn evalFn) *compiled { return &compiled{v: fn} }

func compileNode(n *node, slots *slotTable) (*compiled, error) {
	var kids []*compiled
	for _, k := range n.kids {
		fn, err := compileNode(k, slots)
		if err != nil {
			return nil, err
		}
		kids = append(kids, fn)
	}
	switch n.kind {
	case nLit:
		return valueNode(lit(n.lit)), nil
	case nEvent:
		return valueNode(eventPath(n.segs)), nil
	case nFeat:
		return valueNode(featureFn(n.segs, slots)), nil
	case nGet:
		return valueNode(compileGet(kids[0].v, n.segs)), nil
	case nArith:
		return valueNode(compileArith(n, kids[0].v, kids[1].v)), nil
	case nCmp:
		return compileCompare(n, kids, slots), nil
	case nAnd, nOr:
		return compileLogic(n, kids), nil
	case nCoalesce:
		l, r := kids[0].v, kids[1].v
		return valueNode(func(c *evalCtx) (val, error) {
			lv, err := l(c)
			if err == errUnsup {
				return val{}, err
			}
			if err == nil && lv.k != vNull {
				return lv, nil
			}
			return r(c)
		}), nil
	case nNot:
		return compileNot(kids[0]), nil
	case nMethod:
		fn, err := compileMethod(n, kids)
		if err != nil {
			return nil, err
		}
		return valueNode(fn), nil
	}
	return nil, errNotNative
}

// compileArith is + - * / % on l and r, folded when both are literals (as
// Bloblang folds them).
func compileArith(n *node, l, r evalFn) evalFn {
	op := opcodes[n.op]
	if n.kids[0].kind == nLit && n.kids[1].kind == nLit {
		if v, err := arith(op, n.kids[0].lit, n.kids[1].lit); err == nil {
			n.kind, n.lit, n.kids = nLit, v, nil
			return lit(v)
		}
	}
	return func(c *evalCtx) (val, error) {
		lv, rv, err := both(c, l, r)
		if err != nil {
			return val{}, err
		}
		return arith(op, lv, rv)
	}
}

// compileGet reads segs below what kid yields (an object), null below
// anything else.
func compileGet(kid evalFn, segs []string) evalFn {
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
	}
}

func compileMethod(n *node, kids []*compiled) (evalFn, error) {
	kid, method := kids[0].v, n.method
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
		alt := kids[1].v
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
		return func(c *evalCtx) (val, error) { return *c.amountVal(), nil }
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

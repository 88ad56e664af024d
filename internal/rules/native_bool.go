package rules

// Boolean-typed compilation. A rule is mostly && and || over comparisons,
// and each of those nodes yields a bool or fails: compiled as a boolFn it
// returns one byte (tri) instead of a value and an error, && and || chains
// run as one loop over their operands, and a comparison of a feature or
// the amount against a literal reads the cached value in place. The
// results, the short-circuits and the failures are those of the value form
// (evalFn), which the differential tests hold equal to Bloblang's.

// tri is a boolean node's result: false, true, or the failure the value
// form would return (errBlob or errUnsup).
type tri uint8

const (
	rFalse tri = iota
	rTrue
	rBlob
	rUnsup
)

// boolFn is a compiled boolean-typed expression.
type boolFn func(c *evalCtx) tri

// compiled is a compiled node: v always, b when the node is boolean-typed
// (then v is b's result as a value).
type compiled struct {
	v evalFn
	b boolFn
	// chain is an && or || node's operands, flattened into the chain of
	// its parent of the same operator.
	chain []boolFn
}

func triOf(b bool) tri {
	if b {
		return rTrue
	}
	return rFalse
}

// triErr is the failure err as a tri (only errBlob and errUnsup occur).
func triErr(err error) tri {
	if err == errUnsup {
		return rUnsup
	}
	return rBlob
}

// triResult is a comparison's (bool, error) as a tri.
func triResult(b bool, err error) tri {
	if err != nil {
		return triErr(err)
	}
	return triOf(b)
}

// boolNode is a boolean-typed node, its value form derived from b.
func boolNode(b boolFn) *compiled {
	return &compiled{b: b, v: func(c *evalCtx) (val, error) {
		switch r := b(c); r {
		case rFalse, rTrue:
			return val{k: vBool, b: r == rTrue}, nil
		case rBlob:
			return val{}, errBlob
		}
		return val{}, errUnsup
	}}
}

// truth is n's truthiness as && and || read it (IGetBool; not a bool, a
// number or a json.Number: a failure).
func (n *compiled) truth() boolFn {
	if n.b != nil {
		return n.b
	}
	fn := n.v
	return func(c *evalCtx) tri {
		v, err := fn(c)
		if err != nil {
			return triErr(err)
		}
		b, ok := v.boolean()
		if !ok {
			return rBlob
		}
		return triOf(b)
	}
}

// compileLogic is && (and) or || over a chain of operands with Bloblang's
// truthiness, left to right: an operand is evaluated only when those
// before it did not decide. A chain of the same operator (left-associated,
// as parsed) runs as one loop: ((a && b) && c) stops where a && b && c
// would.
func compileLogic(n *node, kids []*compiled) *compiled {
	var ops []boolFn
	for i, k := range n.kids {
		if k.kind == n.kind && kids[i].chain != nil {
			ops = append(ops, kids[i].chain...)
			continue
		}
		ops = append(ops, kids[i].truth())
	}
	next := rTrue // the result that leaves the chain undecided: true for &&
	if n.kind == nOr {
		next = rFalse
	}
	var out *compiled
	if len(ops) == 2 {
		a, b := ops[0], ops[1]
		out = boolNode(func(c *evalCtx) tri {
			if r := a(c); r != next {
				return r
			}
			return b(c)
		})
	} else {
		out = boolNode(func(c *evalCtx) tri {
			r := next
			for _, op := range ops {
				if r = op(c); r != next {
					return r
				}
			}
			return r
		})
	}
	out.chain = ops
	return out
}

// compileNot is !kid: a bool negated, anything else a failure.
func compileNot(kid *compiled) *compiled {
	if b := kid.b; b != nil {
		return boolNode(func(c *evalCtx) tri {
			switch r := b(c); r {
			case rFalse:
				return rTrue
			case rTrue:
				return rFalse
			default:
				return r
			}
		})
	}
	fn := kid.v
	return boolNode(func(c *evalCtx) tri {
		v, err := fn(c)
		if err != nil {
			return triErr(err)
		}
		if v.k != vBool {
			return rBlob
		}
		return triOf(!v.b)
	})
}

// compareLit is compare(op, *l, r) for a literal r, with the common shapes
// (a number against a number, a bool against a bool) decided in place.
func compareLit(op opcode, l *val, r *val) tri {
	switch r.k {
	case vInt, vFloat:
		li, lf, lk := l.i, l.f, l.k
		if lk == vNum {
			lk = l.nk // ISanitize: its int64 or its ParseFloat reading
		}
		switch {
		case lk == vInt && r.k == vInt:
			return triOf(ordered(op, li, r.i))
		case lk == vInt:
			return triOf(ordered(op, float64(li), r.f))
		case lk == vFloat && r.k == vInt:
			return triOf(ordered(op, lf, float64(r.i)))
		case lk == vFloat:
			return triOf(ordered(op, lf, r.f))
		}
	case vBool:
		if l.k == vBool && (op == opEq || op == opNe) {
			return triOf((l.b == r.b) == (op == opEq))
		}
	}
	return triResult(compare(op, *l, *r))
}

// compileCompare compiles a comparison, with the common shapes (an
// envelope string field, a feature, the amount or a section against a
// literal) read without building values they do not need.
func compileCompare(n *node, kids []*compiled, slots *slotTable) *compiled {
	op, ln, rn := opcodes[n.op], n.kids[0], n.kids[1]
	if rn.kind != nLit {
		l, r := kids[0].v, kids[1].v
		return boolNode(func(c *evalCtx) tri {
			lv, rv, err := both(c, l, r)
			if err != nil {
				return triErr(err)
			}
			return triResult(compare(op, lv, rv))
		})
	}
	rv := rn.lit
	switch {
	case ln.kind == nLit:
		if b, err := compare(op, ln.lit, rv); err == nil {
			res := triOf(b)
			return boolNode(func(*evalCtx) tri { return res })
		}
	case ln.kind == nEvent && len(ln.segs) == 1 && rv.k == vStr && stringField(ln.segs[0]):
		name, rs := ln.segs[0], rv.s
		return boolNode(func(c *evalCtx) tri {
			s, ok := envelopeString(c.env, name)
			if !ok {
				// A field the envelope omits is null: == false, != true,
				// an order a failure.
				if op == opEq || op == opNe {
					return triOf(op == opNe)
				}
				return rBlob
			}
			return triOf(ordered(op, s, rs))
		})
	case ln.kind == nEvent && len(ln.segs) == 1 && ln.segs[0] == "amount":
		return boolNode(func(c *evalCtx) tri { return compareLit(op, c.amountVal(), &rv) })
	case ln.kind == nFeat && len(ln.segs) == 2:
		sec, name := ln.segs[0], ln.segs[1]
		i := slots.slot(sec, name)
		return boolNode(func(c *evalCtx) tri {
			s := c.feature(i, sec, name)
			if s.err != nil {
				return triErr(s.err)
			}
			return compareLit(op, &s.v, &rv)
		})
	case ln.kind == nFeat && len(ln.segs) == 1 && rv.k == vNull && (op == opEq || op == opNe):
		// A section is present (an object, != null) or null.
		sec := ln.segs[0]
		return boolNode(func(c *evalCtx) tri { return triOf(c.f.Has(sec) == (op == opNe)) })
	}
	l := kids[0].v
	return boolNode(func(c *evalCtx) tri {
		lv, err := l(c)
		if err != nil {
			return triErr(err)
		}
		return compareLit(op, &lv, &rv)
	})
}

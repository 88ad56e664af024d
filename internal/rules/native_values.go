package rules

import (
	"encoding/json"
	"math"
	"strconv"
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

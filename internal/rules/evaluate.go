package rules

import (
	"fmt"

	"github.com/speculapro/speculapro/internal/event"
)

// Features are an event's running totals, given feature by feature (the
// stream's features.Values): a program builds its input from only the
// features its rules name.
type Features interface {
	// Has reports whether section is a value (not null or absent).
	Has(section string) bool
	// Feature is one feature of a section, nil when absent.
	Feature(section, name string) any
	// Map is every feature, the map rules see.
	Map() map[string]any
}

// MapFeatures gives a features map (the one rules see) feature by feature,
// for callers that hold the map: EvaluateFeatures(env, MapFeatures(m), sc)
// is Evaluate(env, m).
type MapFeatures map[string]any

// Has reports whether section is a value in m (not null or absent).
func (m MapFeatures) Has(sec string) bool { return m[sec] != nil }

// Feature is m[sec][name], nil when absent.
func (m MapFeatures) Feature(sec, name string) any {
	s, _ := m[sec].(map[string]any)
	return s[name]
}

// Map is m.
func (m MapFeatures) Map() map[string]any { return m }

// EvaluateFeatures runs the program of env's kind over env and features
// given by f, and returns the rules that fired and the rules that could
// not be decided. The hits' and errors' Rule point into the program (do
// not modify them).
//
// Native rules read the event and the features they need directly; when a
// rule runs through Bloblang, its input holds only the features the rules
// name (all of them when a rule uses the features otherwise), which
// decides as the whole set would.
//
// sc (nil for none) holds what an evaluation is built in, reused by the
// next call: one per goroutine.
func (p *Program) EvaluateFeatures(env *event.Envelope, f Features, sc *Scratch) (hits []Hit, errs []RuleError) {
	kp := p.kinds[env.Kind]
	if kp == nil {
		return nil, nil
	}
	if sc == nil {
		sc = &Scratch{}
	}
	return kp.run(env, f, sc)
}

// Evaluate is EvaluateFeatures over a features map (nil: none).
func (p *Program) Evaluate(env *event.Envelope, features map[string]any) (hits []Hit, errs []RuleError) {
	return p.EvaluateFeatures(env, MapFeatures(features), nil)
}

// outcome is one rule's result on one event.
type outcome uint8

const (
	outNo      outcome = iota
	outHit             // fired
	outNotBool         // yielded something else than a bool: notBool names it
	outBlob            // left to Bloblang
)

// run decides every rule of kp on env: the native ones first, then, in one
// Bloblang input built only if needed, the others and any native rule that
// failed (for Bloblang's own error) or met a value it does not model.
func (kp *kindProgram) run(env *event.Envelope, f Features, sc *Scratch) (hits []Hit, errs []RuleError) {
	c := &sc.ctx
	c.reset(env, f, kp.slots)
	outs := sc.outcomes(len(kp.rules))
	blob := kp.decideNative(c, outs, sc)
	var in map[string]any
	var results []any
	if blob {
		features := f.Map()
		if !kp.allFeatures {
			features = sc.features(kp, f)
		}
		in = sc.input(env, features, kp.fields)
		if kp.exec != nil {
			res, err := kp.exec.Query(in)
			results, _ = res.([]any)
			if err != nil || len(results) != len(kp.blobRules) {
				// Cannot happen with every element caught; should it, each
				// rule is decided alone rather than all of them lost.
				results = make([]any, len(kp.blobRules))
			}
		}
	}
	nb, nt := 0, 0
	for i, o := range outs {
		switch o {
		case outHit:
			hits = append(hits, Hit{Rule: kp.rules[i], Reads: kp.readsOf(i, c)})
		case outNotBool:
			errs = append(errs, RuleError{Rule: kp.rules[i], Err: fmt.Errorf("%w: got %s", ErrNotBool, sc.types[nt])})
			nt++
		case outBlob:
			var v any
			if nb < len(kp.blobRules) && kp.blobRules[nb] == i {
				v = results[nb]
				nb++
			}
			if v == nil {
				// The rule failed (inside its catch), yielded null, or was
				// left to Bloblang: run it alone for the reason.
				var err error
				if v, err = kp.single[i].Query(in); err != nil {
					errs = append(errs, RuleError{Rule: kp.rules[i], Err: err})
					continue
				}
			}
			b, isBool := v.(bool)
			switch {
			case !isBool:
				errs = append(errs, RuleError{Rule: kp.rules[i], Err: fmt.Errorf("%w: got %s", ErrNotBool, typeName(v))})
			case b:
				hits = append(hits, Hit{Rule: kp.rules[i], Reads: kp.readsOf(i, c)})
			}
		}
	}
	return hits, errs
}

// decideNative decides the native rules of kp into outs (the types of
// values that are not bools into sc.types), and reports whether any rule is
// left to Bloblang.
func (kp *kindProgram) decideNative(c *evalCtx, outs []outcome, sc *Scratch) (blob bool) {
	types := sc.types[:0]
	blob = len(kp.blobRules) > 0
	for i, fn := range kp.native {
		if fn == nil {
			outs[i] = outBlob
			continue
		}
		if fn.b != nil {
			// A boolean-typed rule (&&, ||, a comparison): a bool or a
			// failure, never another type.
			switch fn.b(c) {
			case rTrue:
				outs[i] = outHit
			case rFalse:
				outs[i] = outNo
			default:
				outs[i], blob = outBlob, true
			}
			continue
		}
		v, err := fn.v(c)
		switch {
		case err != nil:
			outs[i], blob = outBlob, true
		case v.k != vBool:
			outs[i] = outNotBool
			types = append(types, v.typeName())
		case v.b:
			outs[i] = outHit
		default:
			outs[i] = outNo
		}
	}
	sc.types = types
	return blob
}

// readsOf is the features.* values rule i's expression names, as the
// features map holds them.
func (kp *kindProgram) readsOf(i int, c *evalCtx) map[string]any {
	if len(kp.reads[i]) == 0 {
		return nil
	}
	out := make(map[string]any, len(kp.reads[i]))
	for _, rp := range kp.reads[i] {
		if len(rp.segs) == 1 {
			// A whole section: a rule naming one reads all features.
			out[rp.key] = c.f.Map()[rp.segs[0]]
			continue
		}
		out[rp.key] = lookup(c.f.Feature(rp.segs[0], rp.segs[1]), rp.segs[2:])
	}
	return out
}

// lookup follows segs through maps only (what hits have always reported).
func lookup(cur any, segs []string) any {
	for _, s := range segs {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = obj[s]
	}
	return cur
}

// typeName names a value's Bloblang type without showing the value (it may
// be a customer's data).
func typeName(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "string"
	case []byte:
		return "bytes"
	case map[string]any:
		return "object"
	case []any:
		return "array"
	case bool:
		return "bool"
	default:
		return "number"
	}
}

package ruleeval

import (
	"encoding/json"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// evaluatedCount is, for one set of rules in force, how many of the batch's
// events were evaluated against it, and the metadata of those nothing fired
// on (shared by them).
type evaluatedCount struct {
	ev     *rules.Evaluated
	events int64
	noHits map[string]any
}

// batchCounts is evaluatedCount per set of rules in force, over one batch;
// the last program's is kept at hand, as a batch's events mostly come in
// runs of one workspace.
type batchCounts struct {
	by       map[*rules.Evaluated]*evaluatedCount
	lastProg *rules.Program
	last     *evaluatedCount // nil: lastProg has no rules of the kind
}

// of is prog's count (nil when prog has no rules of kind).
func (b *batchCounts) of(prog *rules.Program, kind event.Kind) *evaluatedCount {
	if prog == b.lastProg {
		return b.last
	}
	b.lastProg, b.last = prog, nil
	ev := prog.Evaluated(kind)
	if ev == nil {
		return nil
	}
	c := b.by[ev]
	if c == nil {
		c = &evaluatedCount{ev: ev, noHits: map[string]any{"hits": []any{}, "evaluated": ev}}
		b.by[ev] = c
	}
	b.last = c
	return c
}

// evaluate runs prog (nil: the workspace has no rules) on one event and
// returns its rule_eval metadata: the hits, and under "evaluated" the rules
// it was evaluated against (one shared value per set of rules in force),
// which pg_rule_hits counts per rule version.
func (r *ruleEval) evaluate(msg *service.Message, env *event.Envelope, prog *rules.Program, sc *rules.Scratch,
	counted *batchCounts) map[string]any {
	if prog == nil {
		return noHits
	}
	var found []rules.Hit
	var errs []rules.RuleError
	v, _ := msg.MetaGetMut(metaFeatures)
	if vals, ok := v.(rules.Features); ok {
		// feature_update's: only the features the rules name are built.
		found, errs = prog.EvaluateFeatures(env, vals, sc)
	} else {
		features, _ := v.(map[string]any)
		found, errs = prog.Evaluate(env, features)
	}
	for _, e := range errs {
		r.ruleFailed(e.Rule, e.Err)
	}
	c := counted.of(prog, r.kind)
	if c == nil {
		return noHits
	}
	c.events++
	if len(found) == 0 {
		return c.noHits
	}
	hits := make([]any, 0, len(found))
	for _, h := range found {
		hits = append(hits, hitMeta(h))
		r.m.hits.Incr(1, h.Rule.Name, h.Rule.ModeOrLive())
	}
	return map[string]any{"hits": hits, "evaluated": c.ev}
}

// hitMeta is one hit as pg_rule_hits reads it.
func hitMeta(h rules.Hit) map[string]any {
	var score any
	if h.Rule.Score != "" {
		score = json.Number(h.Rule.Score)
	}
	reads := h.Reads
	if reads == nil {
		reads = map[string]any{}
	}
	return map[string]any{
		"rule":     h.Rule.Name,
		"rule_id":  h.Rule.ID.String(),
		"version":  int64(h.Rule.Version),
		"score":    score,
		"severity": h.Rule.Severity,
		"action":   h.Rule.Action,
		"alert":    h.Rule.Acts(), // a shadow hit raises no alert
		"shadow":   h.Rule.Shadow(),
		"reads":    reads,
	}
}

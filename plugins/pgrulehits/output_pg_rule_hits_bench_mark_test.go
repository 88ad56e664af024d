package pgrulehits

import (
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// markEvaluated adds to every message the rules it was evaluated against,
// one shared value, as rule_eval does.
func markEvaluated(b service.MessageBatch, ws event.UUID, ids []event.UUID) service.MessageBatch {
	ev := &rules.Evaluated{}
	for _, id := range ids {
		ev.Rules = append(ev.Rules, &rules.Rule{ID: id, WorkspaceID: ws, Version: 1, Mode: rules.ModeLive})
	}
	quiet := map[string]any{"hits": []any{}, "evaluated": ev} // shared, as rule_eval shares it
	for _, m := range b {
		v, _ := m.MetaGetMut(metaRuleEval)
		if hits, _ := v.(map[string]any)["hits"].([]any); len(hits) > 0 {
			m.MetaSetMut(metaRuleEval, map[string]any{"hits": hits, "evaluated": ev})
		} else {
			m.MetaSetMut(metaRuleEval, quiet)
		}
	}
	return b
}

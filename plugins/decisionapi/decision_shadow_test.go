package decisionapi

import (
	"testing"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// A shadow rule that fired changes neither the outcome nor the score and is
// not among the rules answered, whatever its action.
func TestOutcomeIgnoresShadowRules(t *testing.T) {
	review := &rules.Rule{Name: "review_live", Action: "review", Score: "10", Mode: rules.ModeLive}
	decline := &rules.Rule{Name: "decline_shadow", Action: "decline", Score: "90", Mode: rules.ModeShadow}
	out, score, fired := outcomeOf([]rules.Hit{{Rule: decline}, {Rule: review}})
	if out != event.OutcomeReview || score != 10 || len(fired) != 1 || fired[0].Rule != "review_live" {
		t.Errorf("outcome %s score %v rules %+v, want review, 10 and review_live alone", out, score, fired)
	}
	out, score, fired = outcomeOf([]rules.Hit{{Rule: decline}})
	if out != event.OutcomeApprove || score != 0 || len(fired) != 0 {
		t.Errorf("outcome %s score %v rules %+v with only a shadow hit, want approve, 0, none", out, score, fired)
	}
}

package decisionapi

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// TestAppendDecisionIsJSONMarshal: the hand-written answer is the bytes
// json.Marshal writes for the same answer.
func TestAppendDecisionIsJSONMarshal(t *testing.T) {
	at := time.Date(2026, 12, 7, 23, 1, 2, 345678000, time.UTC)
	for _, r := range []decisionResponse{
		{ID: "0b7c", ExternalID: "tx-1", Decision: event.OutcomeApprove, Rules: []decisionRule{}, DecidedAt: at, TookMS: 1.234},
		{ID: "0b7d", ExternalID: `a"<b>&\c` + "\u2028\x01", Decision: event.OutcomeDecline, Score: 25.5,
			Rules: []decisionRule{
				{Rule: "large_out", RuleID: "r1", Version: 3, Action: "decline", Score: 20},
				{Rule: "new_payee", RuleID: "r2", Version: 1, Action: "review", Score: 5.5},
			},
			Degraded: true, Reason: degradedTimeout, Repeated: true, DecidedAt: at.Add(time.Nanosecond), TookMS: 230},
		{ID: "x", Decision: event.OutcomeReview, Score: -0.125, Rules: []decisionRule{}, TookMS: 0},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendDecision(nil, &r); string(got) != string(want) {
			t.Errorf("appendDecision:\n got %s\nwant %s", got, want)
		}
	}
}

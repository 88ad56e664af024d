package pgwritetest

import (
	"strings"
	"testing"
)

// CaseBodyFault accepts caseevent's one shape and names what is off in
// anything else: a key beside the shape's (the alert the stream's
// case.alert_attached once carried), a case key missing, a type that is not
// the event's kind.
func TestCaseBodyFault(t *testing.T) {
	const caseObject = `"case":{"id":"c","title":"t","status":"open","priority":"high","assignee":null,"customer_id":null,` +
		`"account_id":null,"group_key":"alert:a","disposition":null,"opened_at":"2026-12-08T00:00:00Z","version":1}`
	good := `{"type":"case.alert_attached","id":"e","workspace_id":"w","created_at":"2026-12-08T00:00:00Z",` + caseObject +
		`,"event":{"kind":"alert_attached","actor":"stream","body":{"alert_id":"a"}}}`
	if err := CaseBodyFault([]byte(good)); err != nil {
		t.Fatalf("the one shape: %v", err)
	}
	for name, c := range map[string]struct{ body, fault string }{
		"alert beside":         {strings.Replace(good, `"id":"e",`, `"id":"e","alert":{"id":"a"},`, 1), "body keys"},
		"case key missing":     {strings.Replace(good, `"version":1`, `"x":1`, 1), "case keys"},
		"event key extra":      {strings.Replace(good, `"actor":"stream"`, `"actor":"stream","at":1`, 1), "event keys"},
		"type of another kind": {strings.Replace(good, `"type":"case.alert_attached"`, `"type":"case.opened"`, 1), "type"},
		"not JSON":             {`{`, "not a JSON object"},
	} {
		if err := CaseBodyFault([]byte(c.body)); err == nil || !strings.Contains(err.Error(), c.fault) {
			t.Errorf("%s: %v, want a fault naming %q", name, err, c.fault)
		}
	}
}

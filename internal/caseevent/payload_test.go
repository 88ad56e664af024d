package caseevent_test

import (
	"encoding/json"
	"maps"
	"slices"
	"testing"

	"github.com/speculapro/speculapro/internal/caseevent"
	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
)

// CaseSQL on a real case row: every key of the shape, each with the row's
// value, and nothing else.
func TestCaseSQLBuildsTheOneShape(t *testing.T) {
	d := dbtest.New(t)
	var raw []byte
	err := d.Connect(t, d.SuperuserURL).QueryRow(t.Context(), `
WITH w AS (INSERT INTO speculapro.workspaces (name) VALUES ('payload') RETURNING id),
     c AS (INSERT INTO speculapro.cases (workspace_id, group_key, title, priority, assignee)
           SELECT id, 'account:a', 'Large payment', 'high', 'ana' FROM w RETURNING *)
SELECT `+caseevent.CaseSQL+`
  FROM c`).Scan(&raw)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]any
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatalf("case %s: %v", raw, err)
	}
	if got, want := keys(c), slices.Sorted(slices.Values(caseevent.CaseKeys)); !slices.Equal(got, want) {
		t.Errorf("case keys %v, want %v", got, want)
	}
	if c["title"] != "Large payment" || c["assignee"] != "ana" || c["group_key"] != "account:a" || c["version"] != 1.0 ||
		c["disposition"] != nil || c["status"] != "open" {
		t.Errorf("case %s", raw)
	}
}

func keys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

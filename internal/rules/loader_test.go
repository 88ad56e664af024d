package rules_test

import (
	"context"
	"testing"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// The loader keeps what Keep selects, compiles again only the workspace
// whose rules changed, leaves out (and reports) a stored rule that does not
// compile, and keeps the rules in force when the database cannot be read.
func TestLoaderRefreshesOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	db := newRulesDB(t)
	super, app, system, wsA, wsB := db.super, db.app, db.system, db.wsA, db.wsB
	apply(t, app, wsA, []rules.Rule{newRule("large", `event.amount >= 5000`), newRule("skip_me", `true`)}, false)
	apply(t, app, wsB, []rules.Rule{newRule("everything", `true`)}, false)

	var refused []string
	loads := 0
	l := rules.NewLoader(system, rules.LoaderOptions{
		Keep:    func(r *rules.Rule) bool { return r.Name != "skip_me" },
		Refused: func(r *rules.Rule, _ error) { refused = append(refused, r.Name) },
		Loaded:  func(*rules.Set) { loads++ },
	})
	if l.Current() != nil {
		t.Fatal("rules in force before the first load")
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	first := l.Current()
	if first.Workspaces() != 2 || first.Rules() != 2 {
		t.Fatalf("%d workspaces, %d rules in force, want 2 and 2 (skip_me left out)", first.Workspaces(), first.Rules())
	}
	if err := l.Refresh(ctx); err != nil || l.Current() != first || loads != 1 {
		t.Fatalf("an unchanged database published again (err %v, loads %d)", err, loads)
	}

	// A rule no compiler accepts, stored behind rules apply's back.
	if _, err := super.Exec(ctx, `UPDATE speculapro.rules SET expression = 'event.amount >=', version = version + 1,
 updated_at = now() WHERE workspace_id = $1 AND name = 'large'`, wsA); err != nil {
		t.Fatal(err)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	second := l.Current()
	if second.Program(wsB) != first.Program(wsB) {
		t.Error("the unchanged workspace was compiled again")
	}
	if len(refused) != 1 || refused[0] != "large" || second.Rules() != 1 {
		t.Errorf("refused %v with %d rules in force, want [large] and 1", refused, second.Rules())
	}
	if second.Program(event.UUID{1}) != nil {
		t.Error("a workspace without rules has a program")
	}

	system.Close(ctx)
	if err := l.Refresh(ctx); err == nil {
		t.Fatal("Refresh over a closed connection succeeded")
	}
	if l.Current() != second {
		t.Error("a failed refresh changed the rules in force")
	}
}

package rules_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

func newRule(name, expr string) rules.Rule {
	return rules.Rule{Name: name, AppliesTo: event.KindTransaction, Expression: expr, Severity: "high",
		Action: "alert", Alert: true, Score: "40", Enabled: true}
}

func createWorkspace(t *testing.T, super *pgx.Conn) event.UUID {
	t.Helper()
	var id string
	if err := super.QueryRow(context.Background(), `INSERT INTO speculapro.workspaces (name) VALUES ('w') RETURNING id::text`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	ws, err := event.ParseUUID(id)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// apply runs rules.Apply as the app role, in its own transaction.
func apply(t *testing.T, app *pgx.Conn, ws event.UUID, rs []rules.Rule, prune bool) string {
	t.Helper()
	ctx := context.Background()
	var changes []rules.Change
	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		var err error
		changes, err = rules.Apply(ctx, tx, ws, rs, prune)
		return err
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var out []string
	for _, c := range changes {
		out = append(out, c.String())
	}
	return strings.Join(out, "; ")
}

// rulesDB is a fresh database with two workspaces, reached as the
// superuser, the app role (rules apply's) and the system role (the
// evaluators').
type rulesDB struct {
	super, app, system *pgx.Conn
	wsA, wsB           event.UUID
}

func newRulesDB(t *testing.T) rulesDB {
	t.Helper()
	d := dbtest.New(t)
	db := rulesDB{super: d.Connect(t, d.SuperuserURL), app: d.Connect(t, d.AppURL), system: d.Connect(t, d.SystemURL)}
	db.wsA, db.wsB = createWorkspace(t, db.super), createWorkspace(t, db.super)
	return db
}

func TestApplyVersionsAndPrune(t *testing.T) {
	ctx := context.Background()
	db := newRulesDB(t)
	super, app, system, wsA, wsB := db.super, db.app, db.system, db.wsA, db.wsB

	fp0, err := rules.Fingerprint(ctx, system)
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := newRule("a", "event.amount > 1"), newRule("b", "true"), newRule("c", "false")
	if got := apply(t, app, wsA, []rules.Rule{a, b, c}, false); got != "created a v1; created b v1; created c v1" {
		t.Fatalf("first apply: %s", got)
	}
	apply(t, app, wsB, []rules.Rule{a}, false)
	fp1, _ := rules.Fingerprint(ctx, system)
	if fp1 == fp0 {
		t.Fatal("fingerprint unchanged after creating rules")
	}

	// The same again (a score written differently is the same score): nothing changes.
	a.Score = "40.00"
	if got := apply(t, app, wsA, []rules.Rule{a, b, c}, false); got != "unchanged a v1; unchanged b v1; unchanged c v1" {
		t.Fatalf("same apply: %s", got)
	}
	if fp, _ := rules.Fingerprint(ctx, system); fp != fp1 {
		t.Fatalf("fingerprint changed by an apply that changed nothing: %s -> %s", fp1, fp)
	}

	// Each field a hit depends on bumps the version.
	edits := []func(r *rules.Rule){
		func(r *rules.Rule) { r.Expression = "event.amount > 2" },
		func(r *rules.Rule) { r.Description = "now described" },
		func(r *rules.Rule) { r.Severity = "low" },
		func(r *rules.Rule) { r.Action = "review" },
		func(r *rules.Rule) { r.Alert = false },
		func(r *rules.Rule) { r.Score = "41.5" },
		func(r *rules.Rule) { r.Enabled = false },
		func(r *rules.Rule) { r.AppliesTo = event.KindAccountEvent },
		func(r *rules.Rule) { r.Mode = rules.ModeShadow },
	}
	for i, edit := range edits {
		edit(&a)
		want := "updated a v" + strconv.Itoa(2+i) + "; unchanged b v1; unchanged c v1"
		if got := apply(t, app, wsA, []rules.Rule{a, b, c}, false); got != want {
			t.Fatalf("edit %d: %s, want %s", i, got, want)
		}
	}
	fp2, _ := rules.Fingerprint(ctx, system)
	if fp2 == fp1 {
		t.Fatal("fingerprint unchanged after updates")
	}

	// b has a hit: prune disables it; c has none: prune deletes it.
	var bID string
	if err := super.QueryRow(ctx, `SELECT id::text FROM speculapro.rules WHERE workspace_id = $1 AND name = 'b'`, wsA).Scan(&bID); err != nil {
		t.Fatal(err)
	}
	if _, err := super.Exec(ctx, `INSERT INTO speculapro.rule_hits (workspace_id, rule_id, rule_version, event_id, event_occurred_at)
VALUES ($1, $2::uuid, 1, gen_random_uuid(), now())`, wsA, bID); err != nil {
		t.Fatal(err)
	}
	if got := apply(t, app, wsA, []rules.Rule{a}, true); got != "unchanged a v10; disabled b; deleted c" {
		t.Fatalf("prune: %s", got)
	}
	if got := apply(t, app, wsA, []rules.Rule{a}, true); got != "unchanged a v10; unchanged b v2" {
		t.Fatalf("second prune: %s", got)
	}

	// Workspace B was not touched; LoadEnabled (system role) sees every workspace's enabled rules.
	loaded, err := rules.LoadEnabled(ctx, system)
	if err != nil {
		t.Fatal(err)
	}
	if len(loaded[wsA]) != 0 || len(loaded[wsB]) != 1 || loaded[wsB][0].Name != "a" || loaded[wsB][0].Version != 1 ||
		loaded[wsB][0].Score != "40" || loaded[wsB][0].WorkspaceID != wsB || loaded[wsB][0].ID.IsZero() ||
		loaded[wsB][0].Mode != rules.ModeLive {
		t.Fatalf("LoadEnabled = %+v", loaded)
	}
	if _, err := rules.Compile(loaded[wsB]); err != nil {
		t.Fatal(err)
	}

	// List (app role) shows one workspace's rules, enabled or not.
	var listed []rules.Rule
	if err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		listed, err = rules.List(ctx, tx, wsA)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(listed) != 2 || listed[0].Name != "a" || listed[0].Enabled || listed[0].Mode != rules.ModeShadow || listed[1].Name != "b" || listed[1].Enabled {
		t.Fatalf("List = %+v", listed)
	}
}

func TestApplyRefusesUnknownWorkspace(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	app := d.Connect(t, d.AppURL)
	ws, _ := event.ParseUUID("6f1c2b9e-3d4a-4f5b-9c8d-7e6f5a4b3c2d")
	err := pgx.BeginFunc(ctx, app, func(tx pgx.Tx) error {
		_, err := rules.Apply(ctx, tx, ws, []rules.Rule{newRule("a", "true")}, false)
		return err
	})
	if err == nil || !strings.Contains(err.Error(), rules.ErrNoWorkspace.Error()) {
		t.Fatalf("Apply to an unknown workspace = %v", err)
	}
}

func TestFingerprintSeesDeleteAndCreate(t *testing.T) {
	ctx := context.Background()
	d := dbtest.New(t)
	super := d.Connect(t, d.SuperuserURL)
	app := d.Connect(t, d.AppURL)
	ws := createWorkspace(t, super)
	apply(t, app, ws, []rules.Rule{newRule("a", "true")}, false)
	before, _ := rules.Fingerprint(ctx, super)
	time.Sleep(2 * time.Millisecond)
	if got := apply(t, app, ws, []rules.Rule{newRule("z", "true")}, true); got != "created z v1; deleted a" {
		t.Fatalf("swap: %s", got)
	}
	if after, _ := rules.Fingerprint(ctx, super); after == before {
		t.Fatalf("fingerprint %s unchanged after one rule replaced another", after)
	}
}

package rulestats_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rulestats"
)

// statsDB is a database with one workspace whose rules have a known
// history: what Read must report, figure by figure.
type statsDB struct {
	super, app *pgx.Conn
	ws         event.UUID
}

func exec(t *testing.T, c *pgx.Conn, q string, args ...any) {
	t.Helper()
	if _, err := c.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

func newStatsDB(t *testing.T) statsDB {
	t.Helper()
	d := dbtest.New(t)
	db := statsDB{super: d.Connect(t, d.SuperuserURL), app: d.Connect(t, d.AppURL)}
	ctx := context.Background()
	if err := db.super.QueryRow(ctx, `INSERT INTO speculapro.workspaces (name) VALUES ('w') RETURNING id`).Scan(&db.ws); err != nil {
		t.Fatal(err)
	}
	// big: live at v2 (v1 had hits two days ago too); quiet: enabled, never
	// evaluated; watch: shadow.
	exec(t, db.super, `INSERT INTO speculapro.rules (workspace_id, name, expression, version, mode) VALUES
($1, 'big', 'true', 2, 'live'), ($1, 'quiet', 'true', 1, 'live'), ($1, 'watch', 'true', 1, 'shadow')`, db.ws)
	exec(t, db.super, `INSERT INTO speculapro.rule_evaluations (workspace_id, rule_id, rule_version, hour, shadow, events)
SELECT $1, r.id, v.version, date_trunc('hour', now(), 'UTC') - v.ago, v.shadow, v.events
  FROM (VALUES ('big', 1, interval '2 days', false, 500), ('big', 2, interval '0', false, 2000),
               ('big', 2, interval '1 hour', false, 2000), ('watch', 1, interval '0', true, 4000),
               ('big', 2, interval '30 days', false, 99999)) AS v(name, version, ago, shadow, events)
  JOIN speculapro.rules r ON r.workspace_id = $1 AND r.name = v.name`, db.ws)
	// Hits: big v2 on 4 events of 3 accounts, each alerted; big v1 on one;
	// watch on 2 (shadow, no alert); one of big v2 before the window.
	exec(t, db.super, `INSERT INTO speculapro.rule_hits (workspace_id, rule_id, rule_version, event_id, event_occurred_at, account_id, hit_at, shadow)
SELECT $1, r.id, v.version, gen_random_uuid(), now(), v.account::uuid, now() - v.ago::interval, r.mode = 'shadow'
  FROM (VALUES ('big', 2, '00000000-0000-4000-8000-000000000001', '1 hour'), ('big', 2, '00000000-0000-4000-8000-000000000001', '2 hours'),
               ('big', 2, '00000000-0000-4000-8000-000000000002', '3 hours'), ('big', 2, '00000000-0000-4000-8000-000000000003', '4 hours'),
               ('big', 1, '00000000-0000-4000-8000-000000000003', '2 days'), ('watch', 1, '00000000-0000-4000-8000-000000000004', '5 minutes'),
               ('watch', 1, '00000000-0000-4000-8000-000000000004', '6 minutes'), ('big', 2, '00000000-0000-4000-8000-000000000005', '40 days'))
       AS v(name, version, account, ago)
  JOIN speculapro.rules r ON r.workspace_id = $1 AND r.name = v.name`, db.ws)
	// Alerts for every live hit; big v2's four in cases: two closed true
	// positives, one closed false positive, one open (no outcome yet); big
	// v1's closed inconclusive.
	exec(t, db.super, `INSERT INTO speculapro.cases (workspace_id, title, status, disposition) VALUES
($1, 'tp', 'closed', 'true_positive'), ($1, 'fp', 'closed', 'false_positive'), ($1, 'open', 'open', NULL),
($1, 'inc', 'closed', 'inconclusive')`, db.ws)
	exec(t, db.super, `INSERT INTO speculapro.alerts (workspace_id, dedupe_key, rule_id, rule_hit_id, event_id, title, case_id)
SELECT h.workspace_id, h.id::text, h.rule_id, h.id, h.event_id, 't',
       (SELECT id FROM speculapro.cases WHERE title = (ARRAY['tp', 'tp', 'fp', 'open', 'inc'])[h.n])
  FROM (SELECT h.*, row_number() OVER (ORDER BY hit_at DESC) AS n FROM speculapro.rule_hits h WHERE NOT shadow) h`)
	return db
}

func read(t *testing.T, db statsDB, since time.Time) rulestats.Report {
	t.Helper()
	var rep rulestats.Report
	err := pgx.BeginFunc(context.Background(), db.app, func(tx pgx.Tx) error {
		var err error
		rep, err = rulestats.Read(context.Background(), tx, db.ws, since)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

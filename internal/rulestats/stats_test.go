package rulestats_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"
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
	// Case dispositions belong to the case work's migration; a database
	// without it gets the column as that migration defines it.
	exec(t, db.super, `ALTER TABLE speculapro.cases ADD COLUMN IF NOT EXISTS disposition text
    CHECK (disposition IN ('true_positive', 'false_positive', 'inconclusive'))`)
	// big: live at v2 (v1 had hits two days ago too); quiet: enabled, never
	// evaluated; watch: shadow.
	exec(t, db.super, `INSERT INTO speculapro.rules (workspace_id, name, expression, version, mode) VALUES
($1, 'big', 'true', 2, 'live'), ($1, 'quiet', 'true', 1, 'live'), ($1, 'watch', 'true', 1, 'shadow')`, db.ws)
	hour := time.Now().UTC().Truncate(time.Hour)
	exec(t, db.super, `INSERT INTO speculapro.rule_evaluations (workspace_id, rule_id, rule_version, hour, shadow, events)
SELECT $1, r.id, v.version, v.hour, v.shadow, v.events
  FROM (VALUES ('big', 1, $2::timestamptz - interval '2 days', false, 500),
               ('big', 2, $2, false, 2000), ('big', 2, $2 - interval '1 hour', false, 2000),
               ('watch', 1, $2, true, 4000), ('big', 2, $2 - interval '30 days', false, 99999))
       AS v(name, version, hour, shadow, events)
  JOIN speculapro.rules r ON r.workspace_id = $1 AND r.name = v.name`, db.ws, hour)
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
	// positives, one closed false positive, one open (no outcome yet).
	exec(t, db.super, `INSERT INTO speculapro.cases (workspace_id, title, status, disposition) VALUES
($1, 'tp', 'closed', 'true_positive'), ($1, 'fp', 'closed', 'false_positive'), ($1, 'open', 'open', NULL)`, db.ws)
	exec(t, db.super, `INSERT INTO speculapro.alerts (workspace_id, dedupe_key, rule_id, rule_hit_id, event_id, title, case_id)
SELECT h.workspace_id, h.id::text, h.rule_id, h.id, h.event_id, 't',
       (SELECT id FROM speculapro.cases WHERE title = (ARRAY['tp', 'tp', 'fp', 'open'])[h.n])
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

func TestReadReportsEachRuleVersion(t *testing.T) {
	db := newStatsDB(t)
	rep := read(t, db, time.Now().Add(-7*24*time.Hour))
	if !rep.Outcomes {
		t.Fatal("outcomes unknown with cases.disposition present")
	}
	var got []string
	for _, r := range rep.Rows {
		got = append(got, strings.Join([]string{r.Rule, fmtInt(r.Version), r.Mode, fmtInt(r.Evaluated), fmtInt(r.Hits),
			fmtInt(r.Alerts), fmtInt(r.Accounts), fmtInt(r.TruePositives), fmtInt(r.FalsePositives)}, " "))
	}
	want := []string{
		"big 2 live 4000 4 4 3 2 1",
		"big 1 live 500 1 1 1 0 0",
		"quiet 1 live 0 0 0 0 0 0",
		"watch 1 shadow 4000 2 0 1 0 0",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rows\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	big := rep.Rows[0]
	if big.HitsPer1000() != 1 || big.Precision() < 0.666 || big.Precision() > 0.667 || big.FirstHit == nil ||
		!big.LastHit.After(*big.FirstHit) {
		t.Errorf("big v2: rate %v precision %v first %v last %v", big.HitsPer1000(), big.Precision(), big.FirstHit, big.LastHit)
	}

	// The table, JSON and CSV say the same; a figure that cannot be known
	// is "-", null and empty.
	var table, js, csv bytes.Buffer
	for f, w := range map[string]*bytes.Buffer{rulestats.FormatTable: &table, rulestats.FormatJSON: &js, rulestats.FormatCSV: &csv} {
		if err := rulestats.Write(w, rep, f); err != nil {
			t.Fatal(err)
		}
	}
	if !strings.Contains(table.String(), "PRECISION") || !strings.Contains(table.String(), "0.667") ||
		!strings.Contains(table.String(), "quiet  v1       live    0          0     -") {
		t.Errorf("table:\n%s", table.String())
	}
	var parsed struct {
		Rules []struct {
			Rule      string   `json:"rule"`
			Rate      *float64 `json:"hits_per_1000"`
			Precision *float64 `json:"precision"`
		} `json:"rules"`
	}
	if err := json.Unmarshal(js.Bytes(), &parsed); err != nil || len(parsed.Rules) != 4 || *parsed.Rules[0].Rate != 1 ||
		parsed.Rules[2].Rate != nil || parsed.Rules[3].Precision != nil {
		t.Errorf("json (%v):\n%s", err, js.String())
	}
	if lines := strings.Split(strings.TrimSpace(csv.String()), "\n"); len(lines) != 5 ||
		!strings.HasPrefix(lines[0], "rule,version,mode,events_evaluated,hits,hits_per_1000") ||
		!strings.HasPrefix(lines[3], "quiet,1,live,0,0,,0,0,,,") {
		t.Errorf("csv:\n%s", csv.String())
	}

	// A day back: big v1's hit and count fall out of the window.
	rep = read(t, db, time.Now().Add(-24*time.Hour))
	if len(rep.Rows) != 3 || rep.Rows[1].Rule != "quiet" {
		t.Errorf("a day back: %+v", rep.Rows)
	}
}

// Before the cases carry dispositions, precision is unknown, not zero.
func TestReadWithoutDispositionsLeavesPrecisionUnknown(t *testing.T) {
	db := newStatsDB(t)
	exec(t, db.super, `ALTER TABLE speculapro.cases DROP COLUMN disposition`)
	rep := read(t, db, time.Now().Add(-7*24*time.Hour))
	if rep.Outcomes || rep.Rows[0].Hits != 4 || rep.Rows[0].TruePositives != 0 {
		t.Fatalf("outcomes %v rows %+v", rep.Outcomes, rep.Rows)
	}
	var table bytes.Buffer
	if err := rulestats.Write(&table, rep, rulestats.FormatTable); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(table.String(), "0.667") {
		t.Errorf("precision shown without dispositions:\n%s", table.String())
	}
}

func TestParseSince(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	for in, want := range map[string]time.Time{"7d": now.AddDate(0, 0, -7), "36h": now.Add(-36 * time.Hour), "90m": now.Add(-90 * time.Minute)} {
		if got, err := rulestats.ParseSince(in, now); err != nil || !got.Equal(want) {
			t.Errorf("ParseSince(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "d", "7 d", "-1d", "0d", "1w", "-3h", "7d2h"} {
		if _, err := rulestats.ParseSince(bad, now); err == nil {
			t.Errorf("ParseSince(%q) accepted", bad)
		}
	}
}

func fmtInt[T int | int64](n T) string { return strconv.FormatInt(int64(n), 10) }

package rulestats

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// Row is one rule version's figures since a time.
type Row struct {
	Rule      string     `json:"rule"`
	RuleID    string     `json:"rule_id"`
	Version   int        `json:"version"`
	Mode      string     `json:"mode"` // live or shadow
	Evaluated int64      `json:"events_evaluated"`
	Hits      int64      `json:"hits"`
	Alerts    int64      `json:"alerts"`
	Accounts  int64      `json:"distinct_accounts"`
	FirstHit  *time.Time `json:"first_hit"`
	LastHit   *time.Time `json:"last_hit"`
	// The outcomes of the version's alerts whose cases are closed: each
	// alert takes its case's disposition.
	TruePositives  int64 `json:"true_positives"`
	FalsePositives int64 `json:"false_positives"`
	Inconclusive   int64 `json:"inconclusive"`
}

// HitsPer1000 is the hit rate per 1,000 events evaluated; NaN when none was.
func (r Row) HitsPer1000() float64 {
	if r.Evaluated == 0 {
		return math.NaN()
	}
	return float64(r.Hits) * 1000 / float64(r.Evaluated)
}

// Precision is true positives over true and false positives among the
// version's alerts in closed cases (an inconclusive one says neither); NaN
// when there is none, which is unknown rather than zero.
func (r Row) Precision() float64 {
	if n := r.TruePositives + r.FalsePositives; n > 0 {
		return float64(r.TruePositives) / float64(n)
	}
	return math.NaN()
}

// Report is the figures of one workspace since a time.
type Report struct {
	Workspace string    `json:"workspace_id"`
	Since     time.Time `json:"since"`
	Rows      []Row     `json:"rules"`
}

// The statistics query. Events evaluated come from the stream's hourly
// counts (so since is taken to its hour for them), hits from rule_hits by
// when they were stored, alerts from the alerts those hits raised. Every
// version with a count or a hit since then has a row, and so does the
// current version of every enabled rule (zeros: it was not evaluated). An
// alert's outcome is its case's disposition once that case is closed.
const statsQuery = `
WITH ev AS (
    SELECT rule_id, rule_version, bool_or(shadow) AS shadow, sum(events)::bigint AS events
      FROM speculapro.rule_evaluations
     WHERE workspace_id = $1 AND hour >= date_trunc('hour', $2::timestamptz, 'UTC')
     GROUP BY rule_id, rule_version
), h AS (
    SELECT rule_id, rule_version, bool_or(shadow) AS shadow, count(*) AS hits,
           count(DISTINCT account_id) AS accounts, min(hit_at) AS first_hit, max(hit_at) AS last_hit
      FROM speculapro.rule_hits
     WHERE workspace_id = $1 AND hit_at >= $2
     GROUP BY rule_id, rule_version
), al AS (
    SELECT h.rule_id, h.rule_version, count(*) AS alerts,
           count(*) FILTER (WHERE c.status = 'closed' AND c.disposition = 'true_positive') AS tp,
           count(*) FILTER (WHERE c.status = 'closed' AND c.disposition = 'false_positive') AS fp,
           count(*) FILTER (WHERE c.status = 'closed' AND c.disposition = 'inconclusive') AS inc
      FROM speculapro.alerts a
      JOIN speculapro.rule_hits h ON h.id = a.rule_hit_id
      LEFT JOIN speculapro.cases c ON c.id = a.case_id
     WHERE a.workspace_id = $1 AND h.hit_at >= $2
     GROUP BY h.rule_id, h.rule_version
), k AS (
    SELECT rule_id, rule_version FROM ev
    UNION SELECT rule_id, rule_version FROM h
    UNION SELECT id, version FROM speculapro.rules WHERE workspace_id = $1 AND enabled
)
SELECT r.name, r.id::text, k.rule_version,
       CASE WHEN coalesce(h.shadow, ev.shadow, r.mode = 'shadow' AND k.rule_version = r.version) THEN 'shadow' ELSE 'live' END,
       coalesce(ev.events, 0), coalesce(h.hits, 0), coalesce(al.alerts, 0), coalesce(h.accounts, 0),
       h.first_hit, h.last_hit, coalesce(al.tp, 0), coalesce(al.fp, 0), coalesce(al.inc, 0)
  FROM k
  JOIN speculapro.rules r ON r.id = k.rule_id
  LEFT JOIN ev ON ev.rule_id = k.rule_id AND ev.rule_version = k.rule_version
  LEFT JOIN h ON h.rule_id = k.rule_id AND h.rule_version = k.rule_version
  LEFT JOIN al ON al.rule_id = k.rule_id AND al.rule_version = k.rule_version
 ORDER BY r.name, k.rule_version DESC`

// Read returns workspace's figures since since, inside tx (which it binds
// to workspace for row-level security, so it runs as the app role and
// reads nothing else).
func Read(ctx context.Context, tx pgx.Tx, workspace event.UUID, since time.Time) (Report, error) {
	rep := Report{Workspace: workspace.String(), Since: since.UTC()}
	if _, err := tx.Exec(ctx, `SELECT set_config('speculapro.workspace_id', $1, true)`, workspace.String()); err != nil {
		return rep, fmt.Errorf("binding the session to workspace %s: %w", workspace, err)
	}
	rows, err := tx.Query(ctx, statsQuery, workspace, since)
	if err != nil {
		return rep, fmt.Errorf("reading the rule statistics of workspace %s: %w", workspace, err)
	}
	rep.Rows, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Row, error) {
		var r Row
		err := row.Scan(&r.Rule, &r.RuleID, &r.Version, &r.Mode, &r.Evaluated, &r.Hits, &r.Alerts, &r.Accounts,
			&r.FirstHit, &r.LastHit, &r.TruePositives, &r.FalsePositives, &r.Inconclusive)
		return r, err
	})
	if err != nil {
		return rep, fmt.Errorf("reading the rule statistics of workspace %s: %w", workspace, err)
	}
	return rep, nil
}

// ParseSince reads how far back to look: a Go duration (36h, 90m) or a
// number of days (7d).
func ParseSince(s string, now time.Time) (time.Time, error) {
	if days, ok := strings.CutSuffix(s, "d"); ok {
		var n int
		if _, err := fmt.Sscanf(days, "%d", &n); err != nil || n <= 0 || fmt.Sprint(n) != days {
			return time.Time{}, fmt.Errorf("--since %q: want a number of days (7d) or a duration (36h)", s)
		}
		return now.AddDate(0, 0, -n), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("--since %q: want a number of days (7d) or a duration (36h)", s)
	}
	return now.Add(-d), nil
}

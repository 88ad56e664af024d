package backtest

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// Sources of a rule in a report.
const (
	SourceFile      = "file"      // a rule of the files under test
	SourceWorkspace = "workspace" // an enabled rule of the workspace (live or shadow), for comparison
)

// Report is what a backtest found.
type Report struct {
	Workspace event.UUID `json:"workspace"`
	From      time.Time  `json:"from"`
	To        time.Time  `json:"to"`
	// Events is how many events of the period were evaluated; Replayed how
	// many were applied in all (the warm-up before the period included).
	Events   int64 `json:"events"`
	Replayed int64 `json:"replayed"`
	// Accounts, Entities and StateBytes: the workspace's accounts (a
	// bound on those the history touches), the entities whose totals were
	// held and their estimated memory.
	Accounts   int64         `json:"accounts"`
	Entities   int           `json:"entities"`
	StateBytes int64         `json:"state_bytes"`
	Elapsed    time.Duration `json:"elapsed_ns"`
	// FirstRow is how long the history's first row took to arrive:
	// PostgreSQL reading and sorting it.
	FirstRow time.Duration `json:"first_row_ns"`
	// PeakRSS is the process's peak resident memory when the replay
	// ended (Linux; 0 elsewhere).
	PeakRSS int64 `json:"peak_rss_bytes"`
	// LiveAlerted is how many events of the period the workspace's live
	// rules raised an alert for (a shadow rule raises none).
	LiveAlerted int           `json:"live_alerted_events"`
	Rules       []*RuleResult `json:"rules"`

	alerted map[event.UUID]bool
	byName  [2]map[string]*RuleResult // by source (0 file, 1 workspace)
}

// RuleResult is one rule's figures over the period.
type RuleResult struct {
	Name    string `json:"name"`
	Source  string `json:"source"` // SourceFile or SourceWorkspace
	Version int    `json:"version,omitempty"`
	// Mode is rules.ModeLive or rules.ModeShadow: a shadow rule's hits are
	// counted like a live rule's, but it raises no alert.
	Mode      string     `json:"mode"`
	AppliesTo event.Kind `json:"applies_to"`
	Alert     bool       `json:"alert"`
	// Hits: events it fired on; Accounts and Customers: distinct ones hit.
	Hits      int64 `json:"hits"`
	Accounts  int   `json:"accounts"`
	Customers int   `json:"customers"`
	// Alerts it would have raised (none for a shadow rule); Overlap: of
	// those, events the live rules alerted on already; New: the others.
	Alerts  int64 `json:"alerts"`
	Overlap int64 `json:"overlap"`
	New     int64 `json:"new"`
	// Errors: events it could not decide (a type error, a missing field).
	Errors int64 `json:"errors"`
	// Stored: for a workspace rule, the hits the stream stored for it
	// over the period (shadow hits for a shadow rule), any version.
	Stored  int64      `json:"stored,omitempty"`
	PerDay  []DayHits  `json:"per_day"`
	Samples []HitTrace `json:"samples,omitempty"`

	accounts, customers map[event.UUID]struct{}
	days                map[int64]int64
}

// DayHits is one UTC day's hits.
type DayHits struct {
	Day  string `json:"day"` // YYYY-MM-DD
	Hits int64  `json:"hits"`
}

// HitTrace is one hit with what made it fire (--explain).
type HitTrace struct {
	EventID    event.UUID     `json:"event_id"`
	ExternalID string         `json:"external_id"`
	OccurredAt time.Time      `json:"occurred_at"`
	Reads      map[string]any `json:"reads"`
}

// prepareReport loads what the report compares with: the workspace's
// rules, live and shadow (as the stream loads them), the events the live
// rules alerted on and the hits every rule stored in the period.
func prepareReport(ctx context.Context, tx pgx.Tx, o Options) (*Report, []rules.Rule, error) {
	rep := &Report{Workspace: o.Workspace, From: o.From.UTC(), To: o.To.UTC(), alerted: map[event.UUID]bool{},
		byName: [2]map[string]*RuleResult{{}, {}}}
	for i := range o.Rules {
		rep.add(&o.Rules[i], SourceFile)
	}
	live, err := workspaceRules(ctx, tx, o.Workspace)
	if err != nil {
		return nil, nil, err
	}
	for i := range live {
		rep.add(&live[i], SourceWorkspace)
	}
	if err := rep.loadLive(ctx, tx); err != nil {
		return nil, nil, err
	}
	return rep, live, nil
}

func (rep *Report) add(r *rules.Rule, source string) {
	rr := &RuleResult{Name: r.Name, Source: source, Mode: r.ModeOrLive(), AppliesTo: r.AppliesTo, Alert: r.Alert,
		accounts: map[event.UUID]struct{}{}, customers: map[event.UUID]struct{}{}, days: map[int64]int64{}}
	if source == SourceWorkspace {
		rr.Version = r.Version
	}
	rep.Rules = append(rep.Rules, rr)
	rep.byName[sourceIndex(source)][r.Name] = rr
}

func sourceIndex(source string) int {
	if source == SourceWorkspace {
		return 1
	}
	return 0
}

// workspaceRules are the workspace's enabled rules, live and shadow, as the
// stream loads them.
func workspaceRules(ctx context.Context, tx pgx.Tx, ws event.UUID) ([]rules.Rule, error) {
	all, err := rules.LoadEnabled(ctx, tx)
	if err != nil {
		return nil, err
	}
	return all[ws], nil
}

// loadLive reads the events of the period the live rules alerted on (only
// a live rule's hit raises an alert), and each workspace rule's stored
// hits.
func (rep *Report) loadLive(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `
SELECT DISTINCT a.event_id FROM speculapro.alerts a
  JOIN speculapro.rule_hits h ON h.workspace_id = a.workspace_id AND h.event_id = a.event_id
 WHERE a.workspace_id = $1 AND h.event_occurred_at >= $2 AND h.event_occurred_at < $3`, rep.Workspace, rep.From, rep.To)
	if err != nil {
		return fmt.Errorf("reading the live alerts of the period: %w", err)
	}
	var id event.UUID
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { rep.alerted[id] = true; return nil }); err != nil {
		return fmt.Errorf("reading the live alerts of the period: %w", err)
	}
	rep.LiveAlerted = len(rep.alerted)
	rows, err = tx.Query(ctx, `
SELECT r.name, count(*) FROM speculapro.rule_hits h JOIN speculapro.rules r ON r.id = h.rule_id
 WHERE h.workspace_id = $1 AND h.event_occurred_at >= $2 AND h.event_occurred_at < $3 GROUP BY r.name`, rep.Workspace, rep.From, rep.To)
	if err != nil {
		return fmt.Errorf("counting the workspace rules' stored hits: %w", err)
	}
	var name string
	var n int64
	_, err = pgx.ForEachRow(rows, []any{&name, &n}, func() error {
		if rr := rep.byName[1][name]; rr != nil {
			rr.Stored = n
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("counting the workspace rules' stored hits: %w", err)
	}
	return nil
}

// record counts one hit of rule (by name, of source) on r.
func (rep *Report) record(source int, h *rules.Hit, r *row, explain int) *RuleResult {
	rr := rep.byName[source][h.Rule.Name]
	if rr == nil {
		return nil
	}
	rr.Hits++
	if r.account != (event.UUID{}) {
		rr.accounts[r.account] = struct{}{}
	}
	rr.customers[r.customer] = struct{}{}
	rr.days[r.env.OccurredAt.Unix()/86400]++
	if rr.Alert && rr.Mode != rules.ModeShadow {
		rr.Alerts++
		if rep.alerted[r.env.ID] {
			rr.Overlap++
		} else {
			rr.New++
		}
	}
	if len(rr.Samples) < explain {
		rr.Samples = append(rr.Samples, HitTrace{EventID: r.env.ID, ExternalID: r.env.ExternalID,
			OccurredAt: r.env.OccurredAt, Reads: h.Reads})
	}
	return rr
}

// ruleError counts an event rule could not decide.
func (rep *Report) ruleError(source int, e *rules.RuleError) {
	if rr := rep.byName[source][e.Rule.Name]; rr != nil {
		rr.Errors++
	}
}

// finish turns the sets into figures: distinct counts and days in order.
func (rep *Report) finish() {
	for _, rr := range rep.Rules {
		rr.Accounts, rr.Customers = len(rr.accounts), len(rr.customers)
		rr.PerDay = rr.PerDay[:0]
		for d, n := range rr.days {
			rr.PerDay = append(rr.PerDay, DayHits{Day: time.Unix(d*86400, 0).UTC().Format(time.DateOnly), Hits: n})
		}
		slices.SortFunc(rr.PerDay, func(a, b DayHits) int { return strings.Compare(a.Day, b.Day) })
	}
}

package caseapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// Bounds of one case's answer: a case of a customer under attack may
// gather thousands of alerts; the answer keeps the newest and says how many
// there are.
const (
	maxAlertsShown = 500
	maxEventsShown = 500
)

// caseDetail is GET /v1/cases/{id}: the case, its alerts (newest first)
// with the rule hit each came from, and its timeline (oldest first).
type caseDetail struct {
	caseView
	Alerts      []caseAlert `json:"alerts"`
	AlertsShown int         `json:"alerts_shown"`
	Events      []caseEvent `json:"events"`
	EventsTotal int64       `json:"events_total"`
}

// caseAlert is one alert of a case.
type caseAlert struct {
	ID        event.UUID  `json:"id"`
	Title     string      `json:"title"`
	Severity  string      `json:"severity"`
	Status    string      `json:"status"`
	EventID   *event.UUID `json:"event_id"`
	CreatedAt time.Time   `json:"created_at"`
	Hit       *ruleHit    `json:"rule_hit"`
}

// ruleHit is why an alert fired: the rule (at the version that fired), its
// score, and the feature values the rule read when it fired.
type ruleHit struct {
	ID              event.UUID      `json:"id"`
	RuleID          event.UUID      `json:"rule_id"`
	Rule            *string         `json:"rule"`
	RuleVersion     int32           `json:"rule_version"`
	Action          *string         `json:"action"`
	Score           *float64        `json:"score"`
	EventOccurredAt time.Time       `json:"event_occurred_at"`
	HitAt           time.Time       `json:"hit_at"`
	Features        json.RawMessage `json:"features"`
}

// caseEvent is one step of a case's timeline.
type caseEvent struct {
	ID        event.UUID      `json:"id"`
	Kind      string          `json:"kind"`
	Actor     *string         `json:"actor"`
	Body      json.RawMessage `json:"body"`
	CreatedAt time.Time       `json:"created_at"`
}

// The case view's queries, each bound to the workspace ($2) besides
// row-level security so the indexes that lead with workspace_id serve them.
var (
	getCaseSQL = `SELECT ` + caseColumns + `, (SELECT count(*) FROM speculapro.alerts a WHERE a.case_id = c.id AND a.workspace_id = c.workspace_id)
  FROM speculapro.cases c WHERE c.id = $1 AND c.workspace_id = $2`

	// The rule's name is the rule's today; its version is the one that
	// fired. reads holds the feature values the rule read when it fired.
	getAlertsSQL = `SELECT a.id, a.title, a.severity, a.status, a.event_id, a.created_at,
       h.id, h.rule_id, r.name, h.rule_version, h.details->>'action', h.score::float8, h.event_occurred_at, h.hit_at,
       coalesce(h.details->'reads', '{}')
  FROM speculapro.alerts a
  LEFT JOIN speculapro.rule_hits h ON h.id = a.rule_hit_id
  LEFT JOIN speculapro.rules r ON r.id = h.rule_id
 WHERE a.case_id = $1 AND a.workspace_id = $2
 ORDER BY a.created_at DESC, a.id DESC
 LIMIT ` + strconv.Itoa(maxAlertsShown)

	getEventsSQL = `SELECT e.id, e.kind, e.actor, e.body, e.created_at, count(*) OVER ()
  FROM speculapro.case_events e
 WHERE e.workspace_id = $2 AND e.case_id = $1
 ORDER BY e.created_at, e.id
 LIMIT ` + strconv.Itoa(maxEventsShown)
)

// getCase reads case id of ws with its alerts, their hits and its timeline
// in one round trip.
func (a *caseAPI) getCase(ctx context.Context, ws, id event.UUID) (*caseDetail, error) {
	d := &caseDetail{Alerts: []caseAlert{}, Events: []caseEvent{}}
	err := a.inWorkspace(ctx, ws, func(b *pgx.Batch) {
		b.Queue(getCaseSQL, id, ws)
		b.Queue(getAlertsSQL, id, ws)
		b.Queue(getEventsSQL, id, ws)
	}, func(br pgx.BatchResults) error {
		var n int64
		if err := br.QueryRow().Scan(append(d.scanTargets(), &n)...); err != nil {
			return err
		}
		d.AlertCount = &n
		if err := readAlerts(br, d); err != nil {
			return err
		}
		return readEvents(br, d)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, errCaseNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("reading case %s: %w", id, err)
	}
	d.AlertsShown = len(d.Alerts)
	return d, nil
}

func readAlerts(br pgx.BatchResults, d *caseDetail) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var al caseAlert
		var h ruleHit
		var hitID, ruleID *event.UUID
		var version *int32
		var occurred, hitAt *time.Time
		if err := rows.Scan(&al.ID, &al.Title, &al.Severity, &al.Status, &al.EventID, &al.CreatedAt,
			&hitID, &ruleID, &h.Rule, &version, &h.Action, &h.Score, &occurred, &hitAt, &h.Features); err != nil {
			return err
		}
		if hitID != nil {
			h.ID, h.RuleID, h.RuleVersion, h.EventOccurredAt, h.HitAt = *hitID, *ruleID, *version, *occurred, *hitAt
			al.Hit = &h
		}
		d.Alerts = append(d.Alerts, al)
	}
	return rows.Err()
}

func readEvents(br pgx.BatchResults, d *caseDetail) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var e caseEvent
		if err := rows.Scan(&e.ID, &e.Kind, &e.Actor, &e.Body, &e.CreatedAt, &d.EventsTotal); err != nil {
			return err
		}
		d.Events = append(d.Events, e)
	}
	return rows.Err()
}

package caseapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/speculapro/speculapro/internal/caseevent"
	"github.com/speculapro/speculapro/internal/event"
)

// Why a change was not made; each is answered with its own status.
var (
	// errCaseNotFound: no such case in the request's workspace (404; a case
	// of another workspace is invisible under row-level security, so it is
	// the same answer).
	errCaseNotFound = errors.New("no such case")
	// errStale: the case changed since the version the request names (412).
	errStale = errors.New("the case changed since the version in If-Match; read it again and retry with its new ETag")
	// errConflict: the change does not apply to the case as it is (409),
	// e.g. closing a closed case.
	errConflict = errors.New("the change does not apply to the case as it is")
)

// caseColumns are the columns of a case as every answer shows it.
const caseColumns = `c.id, c.title, c.status, c.priority, c.assignee, c.customer_id, c.account_id, c.group_key,
       c.disposition, c.closed_note, c.opened_at, c.closed_at, c.updated_at, c.version`

// caseView is a case as answered.
type caseView struct {
	ID          event.UUID  `json:"id"`
	Title       string      `json:"title"`
	Status      string      `json:"status"`
	Priority    string      `json:"priority"`
	Assignee    *string     `json:"assignee"`
	CustomerID  *event.UUID `json:"customer_id"`
	AccountID   *event.UUID `json:"account_id"`
	GroupKey    *string     `json:"group_key"`
	Disposition *string     `json:"disposition"`
	ClosedNote  *string     `json:"closed_note"`
	OpenedAt    time.Time   `json:"opened_at"`
	ClosedAt    *time.Time  `json:"closed_at"`
	UpdatedAt   time.Time   `json:"updated_at"`
	Version     int64       `json:"version"`
	AlertCount  *int64      `json:"alert_count,omitempty"`
}

func (v *caseView) scanTargets() []any {
	return []any{&v.ID, &v.Title, &v.Status, &v.Priority, &v.Assignee, &v.CustomerID, &v.AccountID, &v.GroupKey,
		&v.Disposition, &v.ClosedNote, &v.OpenedAt, &v.ClosedAt, &v.UpdatedAt, &v.Version}
}

// listSQL is the page query of q, bound to workspace $1, with its
// arguments: only the filters q names appear, so each combination is
// planned for what it filters on (the page index serves status and time).
func listSQL(ws event.UUID, q listQuery) (string, []any) {
	var b strings.Builder
	args := []any{ws}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`SELECT ` + caseColumns + `,
       (SELECT count(*) FROM speculapro.alerts a WHERE a.case_id = c.id AND a.workspace_id = c.workspace_id)
  FROM speculapro.cases c
 WHERE c.workspace_id = $1`)
	if q.status != "" {
		b.WriteString(" AND c.status = " + arg(q.status))
	}
	if q.priority != "" {
		b.WriteString(" AND c.priority = " + arg(q.priority))
	}
	if q.assignee != "" {
		b.WriteString(" AND c.assignee = " + arg(q.assignee))
	}
	if q.customer != nil {
		b.WriteString(" AND c.customer_id = " + arg(*q.customer))
	}
	if q.from != nil {
		b.WriteString(" AND c.opened_at >= " + arg(*q.from))
	}
	if q.to != nil {
		b.WriteString(" AND c.opened_at < " + arg(*q.to))
	}
	if q.after != nil {
		b.WriteString(" AND (c.opened_at, c.id) < (" + arg(q.after.openedAt) + ", " + arg(q.after.id) + ")")
	}
	// One more than the page: whether there is a next page.
	b.WriteString(" ORDER BY c.opened_at DESC, c.id DESC LIMIT " + arg(q.limit+1))
	return b.String(), args
}

// inWorkspace runs queue's statements in one round trip, after binding the
// session to ws by row-level security: a batch runs as one implicit
// transaction, so the binding (set_config local) holds for them, and a
// change's statement commits or fails whole. read reads the answers.
func (a *caseAPI) inWorkspace(ctx context.Context, ws event.UUID, queue func(*pgx.Batch), read func(pgx.BatchResults) error) error {
	var b pgx.Batch
	b.Queue(`SELECT set_config('speculapro.workspace_id', $1, true)`, ws.String())
	queue(&b)
	br := a.Pool.SendBatch(ctx, &b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return fmt.Errorf("binding the session to its workspace: %w", err)
	}
	if err := read(br); err != nil {
		_ = br.Close()
		return err
	}
	return br.Close()
}

// listCases returns a page of q and the cursor of the next page ("": none).
func (a *caseAPI) listCases(ctx context.Context, ws event.UUID, q listQuery) ([]caseView, string, error) {
	sql, args := listSQL(ws, q)
	page := make([]caseView, 0, q.limit+1)
	err := a.inWorkspace(ctx, ws, func(b *pgx.Batch) { b.Queue(sql, args...) }, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var v caseView
			var n int64
			if err := rows.Scan(append(v.scanTargets(), &n)...); err != nil {
				return err
			}
			v.AlertCount = &n
			page = append(page, v)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, "", fmt.Errorf("listing cases: %w", err)
	}
	next := ""
	if len(page) > q.limit {
		page = page[:q.limit]
		last := page[len(page)-1]
		next = pageCursor{openedAt: last.OpenedAt, id: last.ID}.String()
	}
	return page, next, nil
}

// changeSQL (set: assignments, each followed by a comma) makes one change in one statement: the case's row updated only
// while it is at the version the request saw and the change applies to it
// (pre), its case event appended, and the event's webhook deliveries queued
// for every enabled endpoint of the workspace whose event_types is empty or
// names the event type, as alerts queue alert.created. The last SELECT
// reads the case as the statement found it (o), so a change that was not
// made says why: no row (404), another version (412), or the change does
// not apply (409). $1 case, $2 version, $3 kind, $4 actor, $5 body, $6
// event type; set and pre may use $7 and on.
func changeSQL(set, pre string) string {
	return `
WITH o AS (
    SELECT id, status, version FROM speculapro.cases WHERE id = $1
), c AS (
    UPDATE speculapro.cases c SET ` + set + `version = c.version + 1, updated_at = now()
      FROM o
     WHERE c.id = o.id AND c.version = $2 AND (` + pre + `)
    RETURNING ` + caseColumns + `, c.workspace_id, o.status AS was
), e AS (
    INSERT INTO speculapro.case_events (workspace_id, case_id, kind, actor, body)
    SELECT c.workspace_id, c.id, $3, $4, $5::jsonb || CASE WHEN $3 = 'status_changed'
                                                           THEN jsonb_build_object('from', c.was) ELSE '{}' END
      FROM c
    RETURNING id, kind, actor, body, created_at
), p AS (
    SELECT e.id, c.workspace_id,
           jsonb_build_object('type', $6::text, 'id', e.id, 'workspace_id', c.workspace_id, 'created_at', e.created_at,
                              'case', ` + caseevent.CaseSQL + `,
                              'event', jsonb_build_object('kind', e.kind, 'actor', e.actor, 'body', e.body)) AS payload
      FROM c, e
), d AS (
    INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
    SELECT p.workspace_id, w.id, $6, p.id, p.payload
      FROM p
      JOIN speculapro.webhook_endpoints w
        ON w.workspace_id = p.workspace_id AND w.enabled
       AND (cardinality(w.event_types) = 0 OR $6 = ANY (w.event_types))
     ORDER BY w.id
        ON CONFLICT (endpoint_id, event_id) DO NOTHING
    RETURNING 1
)
SELECT o.status, o.version, (SELECT p.payload FROM p), (SELECT count(*) FROM d)
  FROM (SELECT 1) one LEFT JOIN o ON true`
}

// changeStatements are each change's SET and precondition.
var changeStatements = map[changeKind]string{
	changeAssigned:      changeSQL(`assignee = $7, `, `o.status <> 'closed'`),
	changeCommented:     changeSQL(``, `true`),
	changeStatusChanged: changeSQL(`status = $7, `, `o.status <> 'closed' AND o.status <> $7`),
	changeClosed: changeSQL(`status = 'closed', disposition = $7, closed_note = NULLIF($8, ''), closed_at = now(), `,
		`o.status <> 'closed'`),
	changeReopened: changeSQL(`status = 'open', disposition = NULL, closed_note = NULL, closed_at = NULL, `,
		`o.status = 'closed'`),
}

// changed is a change made: the event as webhooks carry it, and how many
// deliveries it queued.
type changed struct {
	payload    json.RawMessage
	deliveries int64
}

// applyChange makes c to case id of ws, or says why not (errCaseNotFound,
// errStale, errConflict with the case's status).
func (a *caseAPI) applyChange(ctx context.Context, ws, id event.UUID, c change) (changed, error) {
	body, err := json.Marshal(c.body())
	if err != nil {
		return changed{}, fmt.Errorf("encoding the case event: %w", err)
	}
	args := []any{id, c.version, string(c.kind), c.actor, string(body), c.kind.eventType()}
	switch c.kind {
	case changeAssigned:
		args = append(args, c.assignee)
	case changeStatusChanged:
		args = append(args, c.status)
	case changeClosed:
		args = append(args, c.disposition, c.note)
	}
	var status *string
	var version *int64
	var out changed
	err = a.inWorkspace(ctx, ws, func(b *pgx.Batch) { b.Queue(changeStatements[c.kind], args...) }, func(br pgx.BatchResults) error {
		return br.QueryRow().Scan(&status, &version, &out.payload, &out.deliveries)
	})
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "23505":
		// Reopening while another case of the same group is open: at most
		// one case per group is open.
		return changed{}, fmt.Errorf("%w: another case of the same customer or account is open; work on that one", errConflict)
	case err != nil:
		return changed{}, fmt.Errorf("changing case %s (%s): %w", id, c.kind, err)
	case status == nil:
		return changed{}, errCaseNotFound
	case out.payload != nil:
		return out, nil
	case *version != c.version:
		return changed{}, errStale
	case !c.appliesTo(*status):
		return changed{}, fmt.Errorf("%w: the case is %s", errConflict, *status)
	}
	// Found at the version asked and the change applied to it as read, yet
	// not made: another change won the row meanwhile.
	return changed{}, errStale
}

// appliesTo says whether c applies to a case in status (changeStatements'
// preconditions, for the answer to a change not made).
func (c change) appliesTo(status string) bool {
	switch c.kind {
	case changeAssigned, changeClosed:
		return status != "closed"
	case changeStatusChanged:
		return status != "closed" && status != c.status
	case changeReopened:
		return status == "closed"
	}
	return true
}

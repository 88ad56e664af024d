package backtest

import (
	"context"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// historyQuery returns the workspace's transactions and account events
// whose occurred_at is at or after $2 and that were accepted no later than
// $3, in the order the stream applied them (doc.go "Order"): each event's
// own columns, its parties named by id (parties.go resolves them), so that
// PostgreSQL joins nothing and sorts narrow rows.
const historyQuery = `
SELECT 't', t.id, t.external_id, t.account_id, t.customer_id, t.counterparty_id, t.occurred_at, t.received_at,
       coalesce(t.kind, ''), t.amount::text, t.currency, t.direction, coalesce(t.status, ''),
       coalesce(t.reference, ''), coalesce(t.channel, ''), t.metadata::text,
       t.counterparty_id IS NOT NULL OR t.counterparty_name IS NOT NULL, coalesce(t.counterparty_name, ''),
       coalesce(t.decision, ''), coalesce(t.decision_reason, ''), coalesce(t.decision_score, 0)::float8, t.decided_at
  FROM speculapro.transactions t
 WHERE t.workspace_id = $1 AND t.occurred_at >= $2 AND t.received_at <= $3
UNION ALL
SELECT 'e', e.id, e.external_id, e.account_id, e.customer_id, NULL, e.occurred_at, e.received_at,
       e.kind, '', '', '', '', '', '', e.payload::text,
       false, '', '', '', 0, NULL
  FROM speculapro.account_events e
 WHERE e.workspace_id = $1 AND e.occurred_at >= $2 AND e.received_at <= $3
 ORDER BY 8, 7, 2`

// lastAcceptedQuery is when the last event of the period [$2, $3) was
// accepted: events accepted after it cannot have changed what any event
// of the period saw.
const lastAcceptedQuery = `
SELECT max(m) FROM (
  SELECT max(received_at) AS m FROM speculapro.transactions
   WHERE workspace_id = $1 AND occurred_at >= $2 AND occurred_at < $3
  UNION ALL
  SELECT max(received_at) FROM speculapro.account_events
   WHERE workspace_id = $1 AND occurred_at >= $2 AND occurred_at < $3) x`

// sizeQuery is how much history the replay reads (events; those accepted
// after the period's last are counted too, a bound for the progress) and
// the entities it may hold totals for: the workspace's accounts, customers
// and counterparties, a bound cheap to count.
const sizeQuery = `
SELECT (SELECT count(*) FROM speculapro.transactions WHERE workspace_id = $1 AND occurred_at >= $2)
     + (SELECT count(*) FROM speculapro.account_events WHERE workspace_id = $1 AND occurred_at >= $2),
       (SELECT count(*) FROM speculapro.accounts WHERE workspace_id = $1),
       (SELECT count(*) FROM speculapro.customers WHERE workspace_id = $1),
       (SELECT count(*) FROM speculapro.counterparties WHERE workspace_id = $1)`

// row is one event of the history as read, and the ids of its parties.
type row struct {
	env      event.Envelope
	account  event.UUID // zero for an account event without an account
	customer event.UUID
}

// rowReader scans historyQuery's rows into rows, reusing its buffers.
type rowReader struct {
	parties                                           *parties
	kind, typ, amount, currency, direction, status    string
	reference, channel, object, cpName, dOut, dReason string
	hasCP                                             bool
	dScore                                            float64
	decided                                           *time.Time
	accountID, counterpartyID                         *event.UUID
	dest                                              []any
	r                                                 *row
	// slab holds the rows to come, allocated a batch at a time: one
	// allocation a batch rather than one an event.
	slab []row
}

func newRowReader(p *parties) *rowReader {
	x := &rowReader{parties: p, r: &row{}}
	e := &x.r.env
	x.dest = []any{&x.kind, &e.ID, &e.ExternalID, &x.accountID, &x.r.customer, &x.counterpartyID, &e.OccurredAt,
		&e.ReceivedAt, &x.typ, &x.amount, &x.currency, &x.direction, &x.status, &x.reference, &x.channel, &x.object,
		&x.hasCP, &x.cpName, &x.dOut, &x.dReason, &x.dScore, &x.decided}
	return x
}

// scan reads the current row of rows into a new row of workspace ws; nil
// for an event whose account or customer the workspace does not hold (the
// stream never saw it: the persister stores an event's parties with it).
func (x *rowReader) scan(rows pgx.Rows, ws event.UUID) (*row, error) {
	if len(x.slab) == 0 {
		x.slab = make([]row, batchSize)
	}
	r := &x.slab[0]
	e := &r.env
	x.dest[1], x.dest[2], x.dest[4], x.dest[6], x.dest[7] = &e.ID, &e.ExternalID, &r.customer, &e.OccurredAt, &e.ReceivedAt
	x.accountID, x.counterpartyID, x.decided = nil, nil, nil
	if err := rows.Scan(x.dest...); err != nil {
		return nil, fmt.Errorf("reading a stored event: %w", err)
	}
	var ok bool
	if e.CustomerExternalID, ok = x.parties.customers[r.customer]; !ok {
		*r = row{} // the slot serves the next row
		return nil, nil
	}
	if x.accountID != nil {
		r.account = *x.accountID
		if e.AccountExternalID, ok = x.parties.accounts[r.account]; !ok && x.kind == "t" {
			*r = row{}
			return nil, nil
		}
	}
	x.slab = x.slab[1:]
	e.V, e.WorkspaceID, e.Type = event.Version, ws, x.typ
	e.OccurredAt, e.ReceivedAt = e.OccurredAt.UTC(), e.ReceivedAt.UTC()
	if x.kind == "e" {
		e.Kind, e.Attributes = event.KindAccountEvent, object(x.object)
		return r, nil
	}
	e.Kind, e.Metadata = event.KindTransaction, object(x.object)
	if x.parties.orphans[r.customer] {
		// Sent without its customer: the stream counted it on none.
		e.CustomerExternalID = ""
	}
	e.Amount, e.Currency, e.Direction = x.amount, x.currency, event.Direction(x.direction)
	e.Status, e.Reference, e.Channel = x.status, x.reference, x.channel
	if x.hasCP {
		cp := event.Counterparty{Name: x.cpName}
		if x.counterpartyID != nil {
			if known := x.parties.counterparties[*x.counterpartyID]; known != nil {
				cp = *known
				cp.Name = x.cpName
			}
		}
		e.Counterparty = &cp
	}
	if x.dOut != "" {
		d := &event.Decision{Outcome: event.Outcome(x.dOut), Score: x.dScore}
		if x.dReason != "" {
			d.Reasons = strings.Split(x.dReason, ",")
		}
		if x.decided != nil {
			d.DecidedAt = x.decided.UTC()
		}
		e.Decision = d
	}
	return r, nil
}

// object is a jsonb column's text as the envelope's raw object: the empty
// object the column defaults to is no object at all.
func object(s string) []byte {
	if s == "" || s == "{}" {
		return nil
	}
	return []byte(s)
}

// fingerprintText is a fingerprint as the envelope carries it: the
// persister stores its hex digits as bytes (and any other text as is).
func fingerprintText(b []byte) string {
	if b == nil {
		return ""
	}
	if len(b) == 32 {
		return hex.EncodeToString(b)
	}
	return string(b)
}

// lastAccepted is when the period's last event was accepted (zero when the
// period holds none).
func lastAccepted(ctx context.Context, tx pgx.Tx, ws event.UUID, from, to time.Time) (time.Time, error) {
	var t *time.Time
	if err := tx.QueryRow(ctx, lastAcceptedQuery, ws, from, to).Scan(&t); err != nil {
		return time.Time{}, fmt.Errorf("finding the period's last accepted event: %w", err)
	}
	if t == nil {
		return time.Time{}, nil
	}
	return *t, nil
}

// historySize is what the replay will read: events, and the accounts,
// customers and counterparties whose totals it may hold.
type historySize struct {
	Events, Accounts, Customers, Counterparties int64
}

func sizeOf(ctx context.Context, tx pgx.Tx, ws event.UUID, warm time.Time) (historySize, error) {
	var s historySize
	if err := tx.QueryRow(ctx, sizeQuery, ws, warm).Scan(&s.Events, &s.Accounts, &s.Customers, &s.Counterparties); err != nil {
		return s, fmt.Errorf("sizing the history to replay: %w", err)
	}
	return s, nil
}

package backtest

import (
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// historyQuery's text columns, read from the row's raw bytes (the same in
// PostgreSQL's text and binary formats) rather than scanned: the reader
// decodes a history of millions of events, and scanning makes a string
// of every text column of every row.
const (
	colKind       = 0
	colExternalID = 2
	colType       = 8
	colAmount     = 9
	colCurrency   = 10
	colDirection  = 11
	colStatus     = 12
	colReference  = 13
	colChannel    = 14
	colObject     = 15
	colCPName     = 17
	colDecision   = 18
	colReason     = 19
	columns       = 22
)

// maxNames bounds the strings a reader shares between rows.
const maxNames = 4096

// rowReader decodes historyQuery's rows into rows, reusing its buffers.
type rowReader struct {
	parties                   *parties
	hasCP                     bool
	dScore                    float64
	decided                   *time.Time
	accountID, counterpartyID *event.UUID
	dest                      []any
	// names shares the values a column repeats (currencies, directions,
	// statuses, channels, types, decisions) between rows: one string each.
	names map[string]string
	// text gathers a row's own texts, made one string.
	text []byte
	// slab holds the rows to come, allocated a batch at a time: one
	// allocation a batch rather than one an event.
	slab []row
}

func newRowReader(p *parties) *rowReader {
	x := &rowReader{parties: p, names: map[string]string{}}
	x.dest = make([]any, columns)
	x.dest[3], x.dest[5], x.dest[16], x.dest[20], x.dest[21] = &x.accountID, &x.counterpartyID, &x.hasCP, &x.dScore, &x.decided
	return x
}

// name is b as a string shared with the rows before it that had the same.
func (x *rowReader) name(b []byte) string {
	if s, ok := x.names[string(b)]; ok {
		return s
	}
	s := string(b)
	if len(x.names) < maxNames {
		x.names[s] = s
	}
	return s
}

// ownTexts are the columns of a transaction's row that each row has its
// own value of.
var ownTexts = [...]int{colExternalID, colAmount, colReference, colCPName, colReason}

// texts returns the row's ownTexts as strings, all slices of one new
// string.
func (x *rowReader) texts(raw [][]byte) (out [len(ownTexts)]string) {
	x.text = x.text[:0]
	for _, c := range ownTexts {
		x.text = append(x.text, raw[c]...)
	}
	all, at := string(x.text), 0
	for i, c := range ownTexts {
		out[i], at = all[at:at+len(raw[c])], at+len(raw[c])
	}
	return out
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
	x.dest[1], x.dest[4], x.dest[6], x.dest[7] = &e.ID, &r.customer, &e.OccurredAt, &e.ReceivedAt
	x.accountID, x.counterpartyID, x.decided = nil, nil, nil
	if err := rows.Scan(x.dest...); err != nil {
		return nil, fmt.Errorf("reading a stored event: %w", err)
	}
	raw := rows.RawValues()
	if len(raw) != columns {
		return nil, fmt.Errorf("reading a stored event: %d columns, want %d", len(raw), columns)
	}
	txn := string(raw[colKind]) == "t"
	var ok bool
	if e.CustomerExternalID, ok = x.parties.customers[r.customer]; !ok {
		*r = row{} // the slot serves the next row
		return nil, nil
	}
	if x.accountID != nil {
		r.account = *x.accountID
		if e.AccountExternalID, ok = x.parties.accounts[r.account]; !ok && txn {
			*r = row{}
			return nil, nil
		}
	}
	x.slab = x.slab[1:]
	e.V, e.WorkspaceID, e.Type = event.Version, ws, x.name(raw[colType])
	e.OccurredAt, e.ReceivedAt = e.OccurredAt.UTC(), e.ReceivedAt.UTC()
	if !txn {
		e.ExternalID = string(raw[colExternalID])
		e.Kind, e.Attributes = event.KindAccountEvent, object(raw[colObject])
		return r, nil
	}
	t := x.texts(raw)
	e.ExternalID, e.Amount, e.Reference = t[0], t[1], t[2]
	e.Kind, e.Metadata = event.KindTransaction, object(raw[colObject])
	e.Currency, e.Direction = x.name(raw[colCurrency]), event.Direction(x.name(raw[colDirection]))
	e.Status, e.Channel = x.name(raw[colStatus]), x.name(raw[colChannel])
	if x.hasCP {
		cp := event.Counterparty{Name: t[3]}
		if x.counterpartyID != nil {
			if known := x.parties.counterparties[*x.counterpartyID]; known != nil {
				cp = *known
				cp.Name = t[3]
			}
		}
		e.Counterparty = &cp
	}
	if len(raw[colDecision]) > 0 {
		d := &event.Decision{Outcome: event.Outcome(x.name(raw[colDecision])), Score: x.dScore}
		if t[4] != "" {
			d.Reasons = strings.Split(t[4], ",")
		}
		if x.decided != nil {
			d.DecidedAt = x.decided.UTC()
		}
		e.Decision = d
	}
	return r, nil
}

// object is a jsonb column's text as the envelope's raw object, copied: the
// empty object the column defaults to is no object at all.
func object(b []byte) []byte {
	if len(b) == 0 || string(b) == "{}" {
		return nil
	}
	return append([]byte(nil), b...)
}

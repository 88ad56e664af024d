package pgcopyupsert

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/event"
)

// A batch's rows are written as one binary COPY built here, straight from
// the envelopes, and sent with pgconn's CopyFrom. pgx's CopyFrom costs a
// round trip per batch to learn the columns' types (a prepared SELECT) and
// runs every value through its encoding plans (a plan lookup, and for
// numeric a big.Int division per digit group, per value): 14 % of the
// persister's CPU. The columns' types are fixed by the schema, so the rows
// are encoded here for exactly those types.

// copyBinaryHeader starts binary COPY data: the signature, no flags, no
// header extension.
var copyBinaryHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// pgEpochMicros is 2000-01-01 UTC, PostgreSQL's timestamp epoch, in
// microseconds since the Unix epoch.
const pgEpochMicros = 946684800 * 1000000

// copyRowsBuf holds one batch's binary COPY data.
type copyRowsBuf struct{ b []byte }

// copyBufs keeps a few buffers between batches: a 5,000-row batch is
// about 1.5 MB, which would otherwise be allocated and grown (copied) per
// batch. A channel rather than a sync.Pool, which every other garbage
// collection empties, and the persister collects several times a second.
var copyBufs = make(chan *copyRowsBuf, 4)

// copyRowBytes is about what one transaction takes in binary COPY.
const copyRowBytes = 320

// newCopyRowsBuf returns a buffer for about rows rows, their header written.
func newCopyRowsBuf(rows int) *copyRowsBuf {
	var c *copyRowsBuf
	select {
	case c = <-copyBufs:
	default:
		c = &copyRowsBuf{}
	}
	if need := len(copyBinaryHeader) + rows*copyRowBytes; cap(c.b) < need {
		c.b = make([]byte, 0, need)
	}
	c.b = append(c.b[:0], copyBinaryHeader...)
	return c
}

// release keeps the buffer for the next batch; a rare huge one (a batch of
// large metadata) is dropped rather than kept.
func (c *copyRowsBuf) release() {
	if cap(c.b) > 8<<20 {
		return
	}
	select {
	case copyBufs <- c:
	default:
	}
}

func (c *copyRowsBuf) row(fields int) {
	c.b = binary.BigEndian.AppendUint16(c.b, uint16(fields))
}

func (c *copyRowsBuf) null() { c.b = binary.BigEndian.AppendUint32(c.b, 0xffffffff) }

func (c *copyRowsBuf) uuid(u event.UUID) {
	c.b = binary.BigEndian.AppendUint32(c.b, 16)
	c.b = append(c.b, u[:]...)
}

// uuidOrNull is NULL for nil.
func (c *copyRowsBuf) uuidOrNull(u *event.UUID) {
	if u == nil {
		c.null()
		return
	}
	c.uuid(*u)
}

func (c *copyRowsBuf) text(s string) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

// textOrNull is NULL for "", as textOrNil.
func (c *copyRowsBuf) textOrNull(s string) {
	if s == "" {
		c.null()
		return
	}
	c.text(s)
}

// timeOrNull is NULL for the zero time, as timeOrNil; times are already
// truncated to the microsecond (event.Decode).
func (c *copyRowsBuf) timeOrNull(t time.Time) {
	if t.IsZero() {
		c.null()
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(t.Unix()*1000000+int64(t.Nanosecond())/1000-pgEpochMicros))
}

// jsonb is raw in jsonb's binary format: a version byte, then the text.
func (c *copyRowsBuf) jsonb(raw []byte) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(1+len(raw)))
	c.b = append(c.b, 1)
	c.b = append(c.b, raw...)
}

func (c *copyRowsBuf) numeric(s string) error {
	var err error
	c.b, err = appendNumeric(c.b, s)
	return err
}

func (c *copyRowsBuf) end() { c.b = binary.BigEndian.AppendUint16(c.b, 0xffff) }

// txnRow is one transaction to COPY with the IDs worked out for it.
type txnRow struct {
	e                 *event.Envelope
	account, customer event.UUID
	counterparty      event.UUID // when hasCounterparty; a pointer cost an allocation a row
	hasCounterparty   bool
}

// contentHash is e's content hash (event.ContentHash) as bytea: what the
// ingest API compares a resend with once its Redis entry expired.
func (c *copyRowsBuf) contentHash(e *event.Envelope) {
	h := event.ContentHash(e)
	c.b = binary.BigEndian.AppendUint32(c.b, event.ContentHashLen)
	c.b = append(c.b, h[:]...)
}

// appendTransaction adds r in stagingTxnColumns' order.
func (c *copyRowsBuf) appendTransaction(r txnRow) error {
	e := r.e
	c.row(len(stagingTxnColumns))
	c.uuid(e.ID)
	c.uuid(e.WorkspaceID)
	c.text(e.ExternalID)
	c.uuid(r.account)
	c.uuid(r.customer)
	if r.hasCounterparty {
		c.uuid(r.counterparty)
	} else {
		c.null()
	}
	if err := c.numeric(e.Amount); err != nil {
		// Decode validated the amount, so this is a bug, not bad data.
		return fmt.Errorf("converting the amount of transaction %s: %w", e.ID, err)
	}
	c.text(e.Currency)
	c.text(string(e.Direction))
	c.textOrNull(e.Type)
	c.textOrNull(e.Status)
	c.timeOrNull(e.OccurredAt)
	c.timeOrNull(e.ReceivedAt)
	c.textOrNull(e.Reference)
	if e.Counterparty != nil {
		c.textOrNull(e.Counterparty.Name)
	} else {
		c.null()
	}
	c.textOrNull(e.Channel)
	c.jsonb(jsonOrEmpty(e.Metadata))
	if d := e.Decision; d != nil {
		c.textOrNull(string(d.Outcome))
		c.textOrNull(strings.Join(d.Reasons, ","))
		if err := c.numeric(strconv.FormatFloat(d.Score, 'f', -1, 64)); err != nil {
			return fmt.Errorf("converting the decision score of transaction %s: %w", e.ID, err)
		}
		c.timeOrNull(d.DecidedAt)
	} else {
		c.null()
		c.null()
		c.null()
		c.null()
	}
	c.contentHash(e)
	return nil
}

// appendAccountEvent adds an account event in stagingEventColumns' order.
func (c *copyRowsBuf) appendAccountEvent(e *event.Envelope, customer event.UUID, account *event.UUID) {
	c.row(len(stagingEventColumns))
	c.uuid(e.ID)
	c.uuid(e.WorkspaceID)
	c.text(e.ExternalID)
	c.text(e.Type)
	c.uuid(customer)
	c.uuidOrNull(account)
	c.timeOrNull(e.OccurredAt)
	c.timeOrNull(e.ReceivedAt)
	c.jsonb(jsonOrEmpty(e.Attributes))
	c.contentHash(e)
}

// copyBinary sends c's rows (c.end not yet called) into table's columns
// in tx and returns how many rows were copied.
func copyBinary(ctx context.Context, tx pgx.Tx, table pgx.Identifier, columns []string, c *copyRowsBuf) (int64, error) {
	c.end()
	var sql strings.Builder
	sql.WriteString("COPY ")
	sql.WriteString(table.Sanitize())
	sql.WriteString(" (")
	for i, col := range columns {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString(pgx.Identifier{col}.Sanitize())
	}
	sql.WriteString(") FROM STDIN BINARY")
	// pgconn knows no tracer: the connection's, if it traces COPYs, is
	// told as pgx's CopyFrom would tell it.
	conn := tx.Conn()
	tracer, _ := conn.Config().Tracer.(pgx.CopyFromTracer)
	if tracer != nil {
		ctx = tracer.TraceCopyFromStart(ctx, conn, pgx.TraceCopyFromStartData{TableName: table, ColumnNames: columns})
	}
	tag, err := conn.PgConn().CopyFrom(ctx, bytes.NewReader(c.b), sql.String())
	if tracer != nil {
		tracer.TraceCopyFromEnd(ctx, conn, pgx.TraceCopyFromEndData{CommandTag: tag, Err: err})
	}
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

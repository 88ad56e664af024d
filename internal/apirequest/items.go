package apirequest

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// Limits of one request, documented in openapi.json. The limits of the
// fields are internal/event's (limits.go), the one definition the decoder
// and the load generator use too.
const (
	MaxItemsDefault     = 1000
	MaxBodyBytesDefault = 5 << 20
	MaxIDLen            = event.MaxExternalIDBytes
	MaxNameLen          = event.MaxNameBytes
	maxReferenceLen     = event.MaxReferenceBytes
	MaxLabelLen         = event.MaxLabelBytes
	maxIdentifierLen    = event.MaxIdentifierBytes
)

// Sentinel errors of a request that is refused as a whole (HTTP 4xx).
var (
	// ErrMalformed: the body is not the JSON the endpoint takes.
	ErrMalformed = errors.New("malformed request body")
	// ErrUnknownField: the body names a field the API does not know; a typo
	// must not silently drop data.
	ErrUnknownField = errors.New("unknown field")
	// ErrTooManyItems: more items than max_items.
	ErrTooManyItems = errors.New("too many items")
	// errNoItems: an empty batch is a client bug.
	errNoItems = errors.New("no items")
)

// FieldError is one validation failure of an item, with the path of the
// field that failed (items[3].amount).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Item is one valid item: its ID, the message handed to the pipeline and
// what routes it.
type Item struct {
	Index        int
	ExternalID   string
	ID           event.UUID
	occurredAt   time.Time
	Key          string // Kafka key: workspace:account or workspace:customer
	Value        []byte // the envelope as Kafka gets it: the counterparty protected already
	Envelope     event.Envelope
	Counterparty *WireCounterparty // nil: none
}

// ParsedItem is what decoding one item gives: either an item or its errors.
type ParsedItem struct {
	Item   Item
	Errors []FieldError
}

// DecodeBatch reads {"items": [...]} from body. It returns a request-level
// error (ErrMalformed, ErrUnknownField, ErrTooManyItems, errNoItems) when the
// request must be refused as a whole, else every item with its errors.
//
// prot protects each counterparty identifier (AES-GCM, mask, keyed
// fingerprints) while the item is parsed, exactly as the
// counterparty_fingerprint processor would.
func DecodeBatch(body []byte, kind event.Kind, ws event.UUID, now time.Time, maxItems int, prot *identity.Protector) ([]ParsedItem, error) {
	return DecodeBatchInto(body, kind, ws, now, maxItems, prot, &RecordSlab{})
}

// DecodeBatchInto is DecodeBatch writing the records into slab, which the
// caller releases when no record can be read again.
func DecodeBatchInto(body []byte, kind event.Kind, ws event.UUID, now time.Time, maxItems int, prot *identity.Protector, slab *RecordSlab) ([]ParsedItem, error) {
	raws, itemFaults, err := splitBatch(body, maxItems)
	if err != nil {
		return nil, err
	}
	out := slab.items(len(raws))
	// One Sealer for the request's identifiers: its key is derived once,
	// not once per identifier (identity.Keyring). Without one (no salt
	// could be read), each identifier tries on its own and fails alone.
	var sealer *identity.Sealer
	if kind == event.KindTransaction {
		sealer, _ = prot.Keys.NewSealer()
	}
	wsPrefix := ws.String() + ":"
	keys := make([]byte, 0, len(raws)*(len(wsPrefix)+24))
	mp := memberSlabs.Get().(*[]event.Member)
	members := (*mp)[:0]
	defer func() {
		// The members slice the body; none is read after this call.
		clear(members)
		if cap(members) <= 1<<16 {
			*mp = members[:0]
			memberSlabs.Put(mp)
		}
	}()
	// One item reader and its nested ones for the whole request, reset per
	// item: an item's readers are done with before the next one is read
	// (its errors, kept, are a slice of their own).
	r := &FieldReader{spares: []*FieldReader{{}}}
	text := newBodyText(body)
	var nested [4]*FieldReader
	for i, raw := range raws {
		*r = FieldReader{item: i + 1, present: true, slab: &members, nested: nested[:0], spares: r.spares, Checked: itemFaults == nil}
		if err := r.start(raw); err != nil {
			return nil, err
		}
		r.sealer, r.records, r.wsPrefix, r.text, r.keys = sealer, slab, wsPrefix, text, &keys
		if kind == event.KindTransaction {
			out[i] = r.Transaction(ws, now, prot)
		} else {
			out[i] = r.accountEvent(ws, now)
		}
		out[i].Item.Index = i
		// An unknown field (a typo must not silently drop data) or a JSON
		// fault rejects its item alone, like any other validation error.
		errs := r.WithUnknown(out[i].Errors)
		if itemFaults != nil && itemFaults[i] != nil {
			errs = []FieldError{*itemFaults[i]} // alone: request_wire.go
		}
		if len(errs) > 0 {
			out[i] = ParsedItem{Item: Item{Index: i, ExternalID: out[i].Item.ExternalID}, Errors: errs}
		}
	}
	return out, nil
}

// splitBatch checks a batch's body and splits it into its items (at most
// maxItems), with each item's JSON fault when the body has one (nil
// otherwise), or the request-level error that refuses it as a whole.
func splitBatch(body []byte, maxItems int) ([][]byte, []*FieldError, error) {
	// One pass over the body (CheckBody) proves it is JSON and finds a key
	// named twice, a \u0000, a number numeric cannot hold or nesting too
	// deep. A body that passes and is {"items": [...]} is split in place,
	// its items slices of the body; anything else takes the careful path,
	// which names the fault.
	fault, err := CheckBody(body, framingBatch)
	if err != nil {
		return nil, nil, err
	}
	raws, ok := splitItems(body, fault)
	if !ok {
		if raws, err = readItems(body, fault); err != nil {
			return nil, nil, err
		}
	}
	if len(raws) == 0 {
		return nil, nil, fmt.Errorf("%w: items is empty", errNoItems)
	}
	if len(raws) > maxItems {
		return nil, nil, fmt.Errorf("%w: %d items, at most %d per request", ErrTooManyItems, len(raws), maxItems)
	}
	// Only when the body failed is each item checked, so that every item's
	// fault is answered on its item (the body's check stops at the first).
	var itemFaults []*FieldError
	if fault != nil {
		itemFaults = make([]*FieldError, len(raws))
		found := false
		for i, raw := range raws {
			itemFaults[i] = checkItem(raw, i)
			found = found || itemFaults[i] != nil
		}
		if !found {
			return nil, nil, FaultError(fault)
		}
	}
	return raws, itemFaults, nil
}

// splitItems splits a body CheckBody found no fault in that is exactly
// {"items": [...]} into its items without copying them; false for any
// other body.
func splitItems(body []byte, fault *event.JSONFault) ([][]byte, bool) {
	if fault != nil {
		return nil, false
	}
	fields, ok := event.AppendMembers(nil, body)
	if !ok || len(fields) != 1 || string(fields[0].Key) != "items" {
		return nil, false
	}
	return event.SplitArray(fields[0].Value)
}

// readItems reads {"items": [...]} from a body (JSON, CheckBody found no
// syntax fault) splitItems did not take, with the request-level error that
// explains why it is refused; a fault inside the items is left to them.
func readItems(body []byte, fault *event.JSONFault) ([][]byte, error) {
	fields, ok := event.AppendMembers(nil, body)
	if !ok {
		return nil, fmt.Errorf("%w: want a JSON object with an items array", ErrMalformed)
	}
	var unknown []string
	seen := map[string]bool{}
	for _, f := range fields {
		if k := string(f.Key); k != "items" && !seen[k] {
			seen[k] = true
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return nil, fmt.Errorf("%w %s", ErrUnknownField, QuoteAll(unknown))
	}
	if fault != nil && !strings.HasPrefix(fault.Path, "items[") {
		return nil, FaultError(fault) // items named twice, or the body's bytes
	}
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("%w: want a JSON object with an items array", ErrMalformed)
	case len(fields) > 1: // items named twice, a fault in the first named first
		return nil, FaultError(&event.JSONFault{Path: "items", Reason: event.ReasonDuplicateKey})
	}
	raws, ok := event.SplitArray(fields[0].Value)
	if !ok {
		return nil, fmt.Errorf("%w: items: want an array of objects", ErrMalformed)
	}
	return raws, nil
}

// itemPaths are "items[0]" to "items[999]", made once: every item needs
// its path, in case one of its fields fails.
var itemPaths = func() []string {
	p := make([]string, MaxItemsDefault)
	for i := range p {
		p[i] = "items[" + strconv.Itoa(i) + "]"
	}
	return p
}()

func ItemPath(i int) string {
	if i < len(itemPaths) {
		return itemPaths[i]
	}
	return "items[" + strconv.Itoa(i) + "]"
}

func QuoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// Time reads an RFC 3339 time between 1970 and now + event.FutureSkew.
func (r *FieldReader) Time(field string, required bool, now time.Time) time.Time {
	s := r.Str(field, required, MaxLabelLen)
	if s == "" {
		return time.Time{}
	}
	// The usual form is read directly; any other goes through time.Parse,
	// which decides. year is the year as written (time.Parse's t.Year()).
	t, year, ok := event.ParseRFC3339(s)
	var err error
	if !ok {
		if t, err = time.Parse(time.RFC3339Nano, s); err == nil {
			year = t.Year()
		}
	}
	_, until := event.AcceptWindow(now)
	switch {
	case err != nil:
		r.Fail(field, `want an RFC 3339 time such as "2026-11-30T07:41:12.345Z"`)
	case year < 1970:
		r.Fail(field, "before 1970")
	case t.After(until):
		r.Fail(field, fmt.Sprintf("more than %v in the future", event.FutureSkew))
	default:
		return t.UTC()
	}
	return time.Time{}
}

// occurredAt reads an event's occurred_at, which decides its monthly
// partition: a time outside event.AcceptWindow is refused here, because the
// persister could never store it.
func (r *FieldReader) occurredAt(now time.Time) time.Time {
	t := r.Time("occurred_at", true, now)
	if oldest, _ := event.AcceptWindow(now); !t.IsZero() && t.Before(oldest) {
		r.Fail("occurred_at", "before "+oldest.Format(time.DateOnly)+", the oldest month stored; older transactions cannot be ingested")
		return time.Time{}
	}
	return t
}

// Identifier validates a clear identifier (its kind given or inferred the
// way counterparty_fingerprint infers it). The message never quotes the value.
func (r *FieldReader) Identifier(field, kindField string) (value, kind string) {
	value, kind, _ = r.identifierNormalized(field, kindField)
	return value, kind
}

// identifierNormalized is identifier, also returning the normalised form.
func (r *FieldReader) identifierNormalized(field, kindField string) (value, kind, normalized string) {
	value = r.Str(field, false, maxIdentifierLen)
	kind = r.Enum(kindField, false, string(identity.KindIBAN), string(identity.KindAccountNumber), string(identity.KindPhone))
	if value == "" {
		if kind != "" {
			r.Fail(field, "required when "+kindField+" is given")
		}
		return "", "", ""
	}
	k, norm, err := identity.ReadClear(identity.Kind(kind), value)
	if err != nil {
		r.Fail(field, strings.TrimPrefix(err.Error(), identity.ErrInvalidIdentifier.Error()+": "))
		return "", "", ""
	}
	return value, string(k), norm
}

// WireCounterparty is the counterparty as the client sent it (validated);
// only its protected form (event.Counterparty) leaves the API.
type WireCounterparty struct {
	Name           string `json:"name,omitempty"`
	Identifier     string `json:"identifier,omitempty"`
	IdentifierKind string `json:"identifier_kind,omitempty"`
	normalized     string // the identifier's normalised form
	fp             string // its keyed fingerprint (content hash, identifier_fp)
}

func (r *FieldReader) Transaction(ws event.UUID, now time.Time, prot *identity.Protector) ParsedItem {
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws, ReceivedAt: now,
		ExternalID:         r.ExternalID("external_id", true),
		OccurredAt:         r.occurredAt(now),
		AccountExternalID:  r.ExternalID("account_external_id", true),
		CustomerExternalID: r.ExternalID("customer_external_id", false),
		Amount:             r.amount("amount"),
		Currency:           r.Currency("currency", true),
		Direction:          event.Direction(r.Enum("direction", true, string(event.DirectionIn), string(event.DirectionOut))),
		Type:               r.Str("type", false, MaxLabelLen),
		Status:             r.Str("status", false, MaxLabelLen),
		Reference:          r.Str("reference", false, maxReferenceLen),
		Channel:            r.Str("channel", false, MaxLabelLen),
		Metadata:           r.Object("metadata"),
	}
	cpr := r.sub("counterparty")
	var cp WireCounterparty
	if cpr.present {
		cp.Name = cpr.Str("name", false, MaxNameLen)
		cp.Identifier, cp.IdentifierKind, cp.normalized = cpr.identifierNormalized("identifier", "identifier_kind")
	}
	if len(*r.Errs) > 0 {
		return ParsedItem{Item: Item{ExternalID: e.ExternalID}, Errors: *r.Errs}
	}
	e.ID = event.TransactionID(ws, e.ExternalID, e.OccurredAt)
	var cpp *WireCounterparty
	if cp.Name != "" || cp.Identifier != "" {
		cpp = &cp
		c, err := prot.ProtectCounterparty(ws, cp.Name, identity.Kind(cp.IdentifierKind), cp.normalized, r.sealer)
		if err != nil {
			// A failing cipher, not the client's fault; never the value.
			r.Fail("counterparty.identifier", "cannot be encrypted now")
			return ParsedItem{Item: Item{ExternalID: e.ExternalID}, Errors: *r.Errs}
		}
		cp.fp = c.IdentifierFP
		e.Counterparty = c
	}
	return r.finish(e, cpp, r.keyOf(ws, e.AccountExternalID))
}

func (r *FieldReader) accountEvent(ws event.UUID, now time.Time) ParsedItem {
	e := event.Envelope{
		V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: ws, ReceivedAt: now,
		ExternalID:         r.ExternalID("external_id", true),
		OccurredAt:         r.occurredAt(now),
		CustomerExternalID: r.ExternalID("customer_external_id", true),
		AccountExternalID:  r.ExternalID("account_external_id", false),
		Type:               r.Str("type", true, MaxLabelLen),
		Attributes:         r.Object("attributes"),
	}
	if len(*r.Errs) > 0 {
		return ParsedItem{Item: Item{ExternalID: e.ExternalID}, Errors: *r.Errs}
	}
	e.ID = event.AccountEventID(ws, e.ExternalID, e.OccurredAt)
	return r.finish(e, nil, r.keyOf(ws, e.CustomerExternalID))
}

// keyOf is the Kafka key <workspace>:<id>, the workspace's part made once
// per request when the reader has it.
func (r *FieldReader) keyOf(ws event.UUID, id string) string {
	if r.wsPrefix == "" {
		return ws.String() + ":" + id
	}
	if r.keys == nil {
		return r.wsPrefix + id
	}
	// Appended to the request's buffer of keys and read in place: bytes
	// once written there are never written again (a buffer that grows is
	// copied, and the keys cut before keep the old one).
	start := len(*r.keys)
	*r.keys = append(append(*r.keys, r.wsPrefix...), id...)
	k := (*r.keys)[start:]
	return unsafe.String(unsafe.SliceData(k), len(k))
}

// finish encodes the envelope, once (unless NoRecord). The reader's checks are stricter than
// event.Encode's (TestRecordIsEncodes), so what it encodes is a record the
// persister reads.
func (r *FieldReader) finish(e event.Envelope, cp *WireCounterparty, key string) ParsedItem {
	it := Item{ExternalID: e.ExternalID, ID: e.ID, occurredAt: e.OccurredAt, Key: key, Envelope: e, Counterparty: cp}
	if !r.NoRecord {
		it.encode(r.records)
	}
	return ParsedItem{Item: it}
}

package api

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
	maxItemsDefault     = 1000
	maxBodyBytesDefault = 5 << 20
	maxIDLen            = event.MaxExternalIDBytes
	maxNameLen          = event.MaxNameBytes
	maxReferenceLen     = event.MaxReferenceBytes
	maxLabelLen         = event.MaxLabelBytes
	maxIdentifierLen    = event.MaxIdentifierBytes
)

// Sentinel errors of a request that is refused as a whole (HTTP 4xx).
var (
	// errMalformed: the body is not the JSON the endpoint takes.
	errMalformed = errors.New("malformed request body")
	// errUnknownField: the body names a field the API does not know; a typo
	// must not silently drop data.
	errUnknownField = errors.New("unknown field")
	// errTooManyItems: more items than max_items.
	errTooManyItems = errors.New("too many items")
	// errNoItems: an empty batch is a client bug.
	errNoItems = errors.New("no items")
)

// FieldError is one validation failure of an item, with the path of the
// field that failed (items[3].amount).
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// item is one valid item: its ID, the message handed to the pipeline and
// what routes it.
type item struct {
	index      int
	externalID string
	id         event.UUID
	occurredAt time.Time
	key        string // Kafka key: workspace:account or workspace:customer
	value      []byte // the envelope as Kafka gets it: the counterparty protected already
	env        event.Envelope
	cp         *wireCounterparty // nil: none
}

// parsedItem is what decoding one item gives: either an item or its errors.
type parsedItem struct {
	item   item
	errors []FieldError
}

// decodeBatch reads {"items": [...]} from body. It returns a request-level
// error (errMalformed, errUnknownField, errTooManyItems, errNoItems) when the
// request must be refused as a whole, else every item with its errors.
//
// prot protects each counterparty identifier (AES-GCM, mask, keyed
// fingerprints) while the item is parsed, exactly as the
// counterparty_fingerprint processor would.
func decodeBatch(body []byte, kind event.Kind, ws event.UUID, now time.Time, maxItems int, prot *identity.Protector) ([]parsedItem, error) {
	return decodeBatchInto(body, kind, ws, now, maxItems, prot, &recordSlab{})
}

// decodeBatchInto is decodeBatch writing the records into slab, which the
// caller releases when no record can be read again.
func decodeBatchInto(body []byte, kind event.Kind, ws event.UUID, now time.Time, maxItems int, prot *identity.Protector, slab *recordSlab) ([]parsedItem, error) {
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
	r := &fieldReader{spares: []*fieldReader{{}}}
	text := newBodyText(body)
	var nested [4]*fieldReader
	for i, raw := range raws {
		*r = fieldReader{item: i + 1, present: true, slab: &members, nested: nested[:0], spares: r.spares, checked: itemFaults == nil}
		if err := r.start(raw); err != nil {
			return nil, err
		}
		r.sealer, r.records, r.wsPrefix, r.text, r.keys = sealer, slab, wsPrefix, text, &keys
		if kind == event.KindTransaction {
			out[i] = r.transaction(ws, now, prot)
		} else {
			out[i] = r.accountEvent(ws, now)
		}
		out[i].item.index = i
		// An unknown field (a typo must not silently drop data) or a JSON
		// fault rejects its item alone, like any other validation error.
		errs := r.withUnknown(out[i].errors)
		if itemFaults != nil && itemFaults[i] != nil {
			errs = []FieldError{*itemFaults[i]} // alone: request_wire.go
		}
		if len(errs) > 0 {
			out[i] = parsedItem{item: item{index: i, externalID: out[i].item.externalID}, errors: errs}
		}
	}
	return out, nil
}

// splitBatch checks a batch's body and splits it into its items (at most
// maxItems), with each item's JSON fault when the body has one (nil
// otherwise), or the request-level error that refuses it as a whole.
func splitBatch(body []byte, maxItems int) ([][]byte, []*FieldError, error) {
	// One pass over the body (checkBody) proves it is JSON and finds a key
	// named twice, a \u0000, a number numeric cannot hold or nesting too
	// deep. A body that passes and is {"items": [...]} is split in place,
	// its items slices of the body; anything else takes the careful path,
	// which names the fault.
	fault, err := checkBody(body, framingBatch)
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
		return nil, nil, fmt.Errorf("%w: %d items, at most %d per request", errTooManyItems, len(raws), maxItems)
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
			return nil, nil, faultError(fault)
		}
	}
	return raws, itemFaults, nil
}

// splitItems splits a body checkBody found no fault in that is exactly
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

// readItems reads {"items": [...]} from a body (JSON, checkBody found no
// syntax fault) splitItems did not take, with the request-level error that
// explains why it is refused; a fault inside the items is left to them.
func readItems(body []byte, fault *event.JSONFault) ([][]byte, error) {
	fields, ok := event.AppendMembers(nil, body)
	if !ok {
		return nil, fmt.Errorf("%w: want a JSON object with an items array", errMalformed)
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
		return nil, fmt.Errorf("%w %s", errUnknownField, quoteAll(unknown))
	}
	if fault != nil && !strings.HasPrefix(fault.Path, "items[") {
		return nil, faultError(fault) // items named twice, or the body's bytes
	}
	switch {
	case len(fields) == 0:
		return nil, fmt.Errorf("%w: want a JSON object with an items array", errMalformed)
	case len(fields) > 1: // items named twice, a fault in the first named first
		return nil, faultError(&event.JSONFault{Path: "items", Reason: event.ReasonDuplicateKey})
	}
	raws, ok := event.SplitArray(fields[0].Value)
	if !ok {
		return nil, fmt.Errorf("%w: items: want an array of objects", errMalformed)
	}
	return raws, nil
}

// itemPaths are "items[0]" to "items[999]", made once: every item needs
// its path, in case one of its fields fails.
var itemPaths = func() []string {
	p := make([]string, maxItemsDefault)
	for i := range p {
		p[i] = "items[" + strconv.Itoa(i) + "]"
	}
	return p
}()

func itemPath(i int) string {
	if i < len(itemPaths) {
		return itemPaths[i]
	}
	return "items[" + strconv.Itoa(i) + "]"
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// time reads an RFC 3339 time between 1970 and now + event.FutureSkew.
func (r *fieldReader) time(field string, required bool, now time.Time) time.Time {
	s := r.str(field, required, maxLabelLen)
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
		r.fail(field, `want an RFC 3339 time such as "2026-11-30T07:41:12.345Z"`)
	case year < 1970:
		r.fail(field, "before 1970")
	case t.After(until):
		r.fail(field, fmt.Sprintf("more than %v in the future", event.FutureSkew))
	default:
		return t.UTC()
	}
	return time.Time{}
}

// occurredAt reads an event's occurred_at, which decides its monthly
// partition: a time outside event.AcceptWindow is refused here, because the
// persister could never store it.
func (r *fieldReader) occurredAt(now time.Time) time.Time {
	t := r.time("occurred_at", true, now)
	if oldest, _ := event.AcceptWindow(now); !t.IsZero() && t.Before(oldest) {
		r.fail("occurred_at", "before "+oldest.Format(time.DateOnly)+", the oldest month stored; older transactions cannot be ingested")
		return time.Time{}
	}
	return t
}

// identifier validates a clear identifier (its kind given or inferred the
// way counterparty_fingerprint infers it). The message never quotes the value.
func (r *fieldReader) identifier(field, kindField string) (value, kind string) {
	value, kind, _ = r.identifierNormalized(field, kindField)
	return value, kind
}

// identifierNormalized is identifier, also returning the normalised form.
func (r *fieldReader) identifierNormalized(field, kindField string) (value, kind, normalized string) {
	value = r.str(field, false, maxIdentifierLen)
	kind = r.enum(kindField, false, string(identity.KindIBAN), string(identity.KindAccountNumber), string(identity.KindPhone))
	if value == "" {
		if kind != "" {
			r.fail(field, "required when "+kindField+" is given")
		}
		return "", "", ""
	}
	k := identity.Kind(kind)
	if k == "" {
		k = identity.InferKind(value)
	}
	norm, err := identity.Normalize(k, value)
	if err != nil {
		r.fail(field, strings.TrimPrefix(err.Error(), identity.ErrInvalidIdentifier.Error()+": "))
		return "", "", ""
	}
	return value, string(k), norm
}

// wireCounterparty is the counterparty as the client sent it (validated);
// only its protected form (event.Counterparty) leaves the API.
type wireCounterparty struct {
	Name           string `json:"name,omitempty"`
	Identifier     string `json:"identifier,omitempty"`
	IdentifierKind string `json:"identifier_kind,omitempty"`
	normalized     string // the identifier's normalised form
	fp             string // its keyed fingerprint (content hash, identifier_fp)
}

func (r *fieldReader) transaction(ws event.UUID, now time.Time, prot *identity.Protector) parsedItem {
	e := event.Envelope{
		V: event.Version, Kind: event.KindTransaction, WorkspaceID: ws, ReceivedAt: now,
		ExternalID:         r.externalID("external_id", true),
		OccurredAt:         r.occurredAt(now),
		AccountExternalID:  r.externalID("account_external_id", true),
		CustomerExternalID: r.externalID("customer_external_id", false),
		Amount:             r.amount("amount"),
		Currency:           r.currency("currency", true),
		Direction:          event.Direction(r.enum("direction", true, string(event.DirectionIn), string(event.DirectionOut))),
		Type:               r.str("type", false, maxLabelLen),
		Status:             r.str("status", false, maxLabelLen),
		Reference:          r.str("reference", false, maxReferenceLen),
		Channel:            r.str("channel", false, maxLabelLen),
		Metadata:           r.object("metadata"),
	}
	cpr := r.sub("counterparty")
	var cp wireCounterparty
	if cpr.present {
		cp.Name = cpr.str("name", false, maxNameLen)
		cp.Identifier, cp.IdentifierKind, cp.normalized = cpr.identifierNormalized("identifier", "identifier_kind")
	}
	if len(*r.errs) > 0 {
		return parsedItem{item: item{externalID: e.ExternalID}, errors: *r.errs}
	}
	e.ID = event.TransactionID(ws, e.ExternalID, e.OccurredAt)
	var cpp *wireCounterparty
	if cp.Name != "" || cp.Identifier != "" {
		cpp = &cp
		c, err := prot.ProtectCounterparty(ws, cp.Name, identity.Kind(cp.IdentifierKind), cp.normalized, r.sealer)
		if err != nil {
			// A failing cipher, not the client's fault; never the value.
			r.fail("counterparty.identifier", "cannot be encrypted now")
			return parsedItem{item: item{externalID: e.ExternalID}, errors: *r.errs}
		}
		cp.fp = c.IdentifierFP
		e.Counterparty = c
	}
	return r.finish(e, cpp, r.keyOf(ws, e.AccountExternalID))
}

func (r *fieldReader) accountEvent(ws event.UUID, now time.Time) parsedItem {
	e := event.Envelope{
		V: event.Version, Kind: event.KindAccountEvent, WorkspaceID: ws, ReceivedAt: now,
		ExternalID:         r.externalID("external_id", true),
		OccurredAt:         r.occurredAt(now),
		CustomerExternalID: r.externalID("customer_external_id", true),
		AccountExternalID:  r.externalID("account_external_id", false),
		Type:               r.str("type", true, maxLabelLen),
		Attributes:         r.object("attributes"),
	}
	if len(*r.errs) > 0 {
		return parsedItem{item: item{externalID: e.ExternalID}, errors: *r.errs}
	}
	e.ID = event.AccountEventID(ws, e.ExternalID, e.OccurredAt)
	return r.finish(e, nil, r.keyOf(ws, e.CustomerExternalID))
}

// keyOf is the Kafka key <workspace>:<id>, the workspace's part made once
// per request when the reader has it.
func (r *fieldReader) keyOf(ws event.UUID, id string) string {
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

// finish encodes the envelope, once. The reader's checks are stricter than
// event.Encode's (TestRecordIsEncodes), so what it encodes is a record the
// persister reads.
func (r *fieldReader) finish(e event.Envelope, cp *wireCounterparty, key string) parsedItem {
	it := item{externalID: e.ExternalID, id: e.ID, occurredAt: e.OccurredAt, key: key, env: e, cp: cp}
	it.encode(r.records)
	return parsedItem{item: it}
}

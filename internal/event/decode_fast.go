package event

import (
	"strconv"
	"strings"
	"unicode/utf8"
	"unsafe"
)

// decodeFast reads an envelope in the shape Encode writes it: one object of
// known keys, each once, with strings (escaped ones decoded as
// encoding/json decodes them) and the metadata and attributes objects, the
// counterparty and decision objects. It reports false as soon as the record
// strays from that shape in any way (an escaped, unknown, repeated or
// differently cased key, a null, "v" other than 1, an escaped time, bytes
// after the object), and Decode then reads the record with encoding/json;
// so does a record it read that normalize refuses. Every record it is
// unsure of, and every error, comes from the one general path.
// What it accepts it reads exactly as encoding/json would (the
// differential suite, codec_differential_test.go, holds it to that).
//
// It is the persister's heaviest per-record step made cheap: one string
// conversion of the record with substrings for the fields, one copy of the
// metadata, against encoding/json's allocation per field and its reflection
// (about 3× faster on a realistic transaction).
//
// shared makes the envelope's strings and metadata share b's memory instead
// of a copy of it (DecodeShared).
//
// plain reports that no string of the record holds DEL, so the limits'
// character checks (CheckText) have nothing left to find: what str reads
// is valid UTF-8 without a byte below 0x20, and a rune beyond ASCII is
// never a control character CheckText refuses. Names beyond ASCII ("Köln",
// "Novák") are most records' counterparty: while they also counted as not
// plain, CheckText's loops ran over every text field of those records.
func decodeFast(b []byte, shared bool) (e Envelope, plain, ok bool) {
	if plain, ok = decodeFastTo(&e, nil, b, shared); !ok {
		return Envelope{}, false, false
	}
	return e, plain, true
}

// decodeFastTo is decodeFast writing the envelope to e (whatever it held
// is dropped; unspecified when ok is false) and the record's counterparty,
// if it has one, to cp rather than to an allocation of its own (cp nil:
// allocated).
func decodeFastTo(e *Envelope, cp *Counterparty, b []byte, shared bool) (plain, ok bool) {
	*e = Envelope{}
	d := fastDecoder{b: b, shared: shared, cp: cp}
	if shared {
		d.s = unsafe.String(unsafe.SliceData(b), len(b))
	} else {
		d.s = string(b)
	}
	if !d.object(func(key string) bool { return d.envelopeField(e, key) }) {
		return false, false
	}
	d.ws()
	if d.i != len(d.s) {
		return false, false
	}
	return !d.unplain, true
}

type fastDecoder struct {
	b      []byte        // the record, whose bytes s holds
	shared bool          // s is b's memory, not a copy
	cp     *Counterparty // where the counterparty goes; nil: allocated
	s      string
	i      int
	seen   uint64 // keys read in the current object, by bit
	// unplain: a string read so far holds DEL, which CheckText must then
	// find.
	unplain bool
	// decoded: a string read since it was last cleared had escapes or
	// invalid UTF-8 (unquoteAt).
	decoded bool
}

func (d *fastDecoder) ws() { d.i = skipSpace(d.b, d.i) }

// object reads {"key": value, ...}, field reading each value after its key
// and colon, and reports false on anything else.
func (d *fastDecoder) object(field func(key string) bool) bool {
	d.ws()
	if d.i >= len(d.s) || d.s[d.i] != '{' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == '}' {
		d.i++
		return true
	}
	for {
		d.ws()
		key, ok := d.key()
		if !ok {
			return false
		}
		d.ws()
		if d.i >= len(d.s) || d.s[d.i] != ':' {
			return false
		}
		d.i++
		d.ws()
		if !field(key) {
			return false
		}
		if end, ok := d.afterMember('}'); end || !ok {
			return ok
		}
	}
}

// key reads an object's key, which must be plain: encoding/json matches an
// escaped or differently cased key to a field too, and such a record is
// left to it.
func (d *fastDecoder) key() (string, bool) {
	d.decoded = false
	k, ok := d.str()
	return k, ok && !d.decoded
}

// afterMember reads what follows an object's or array's member: a ',' (more
// to come) or closing (the end, reported as end).
func (d *fastDecoder) afterMember(closing byte) (end, ok bool) {
	d.i, end, ok = afterMember(d.b, d.i, closing)
	return end, ok
}

// str reads a string (scanString) as a substring of the record when it is
// plain (no escape, valid UTF-8), else decoded by unquoteAt as
// encoding/json decodes it. Either way no control character is left
// unescaped.
func (d *fastDecoder) str() (string, bool) {
	if d.i >= len(d.s) || d.s[d.i] != '"' {
		return "", false
	}
	end, flags, ok := scanString(d.b, d.i)
	if !ok {
		return "", false
	}
	if flags&strDEL != 0 {
		d.unplain = true
	}
	v := d.s[d.i+1 : end-1]
	if flags&strEscaped != 0 || flags&strBeyondASCII != 0 && !utf8.ValidString(v) {
		return d.unquoteAt(d.i+1, end)
	}
	d.i = end
	return v, true
}

// unquoteAt reads the string whose content is b[start:end-1], with escapes
// or invalid UTF-8, decoded into a string of its own. Its text may then
// hold anything, so the record is no longer plain.
func (d *fastDecoder) unquoteAt(start, end int) (string, bool) {
	v, ok := appendUnquoted(make([]byte, 0, end-start), d.b[start:end-1])
	if !ok {
		return "", false
	}
	d.i = end
	d.unplain, d.decoded = true, true
	return unsafe.String(unsafe.SliceData(v), len(v)), true
}

// once marks bit as read in the current object, false when it was already.
func (d *fastDecoder) once(bit uint) bool {
	if d.seen&(1<<bit) != 0 {
		return false
	}
	d.seen |= 1 << bit
	return true
}

// envelopeField reads the value of one top-level key into e.
func (d *fastDecoder) envelopeField(e *Envelope, key string) bool {
	var into *string
	var bit uint
	switch key {
	case "v":
		if !d.once(0) || !d.lit("1") {
			return false
		}
		e.V = 1
		return true
	case "kind":
		v, ok := d.str()
		e.Kind = Kind(v)
		return ok && d.once(1)
	case "id":
		return d.once(2) && d.uuid(&e.ID)
	case "workspace_id":
		return d.once(3) && d.uuid(&e.WorkspaceID)
	case "occurred_at":
		return d.once(4) && d.time(&e.OccurredAt)
	case "received_at":
		return d.once(5) && d.time(&e.ReceivedAt)
	case "direction":
		v, ok := d.str()
		e.Direction = Direction(v)
		return ok && d.once(6)
	case "counterparty":
		return d.once(7) && d.counterparty(e)
	case "metadata":
		if !d.once(8) {
			return false
		}
		raw, ok := d.rawObject()
		e.Metadata = raw
		return ok
	case "attributes":
		if !d.once(9) {
			return false
		}
		raw, ok := d.rawObject()
		e.Attributes = raw
		return ok
	case "decision":
		return d.once(19) && d.decision(e)
	case "external_id":
		into, bit = &e.ExternalID, 10
	case "customer_external_id":
		into, bit = &e.CustomerExternalID, 11
	case "account_external_id":
		into, bit = &e.AccountExternalID, 12
	case "type":
		into, bit = &e.Type, 13
	case "amount":
		into, bit = &e.Amount, 14
	case "currency":
		into, bit = &e.Currency, 15
	case "status":
		into, bit = &e.Status, 16
	case "reference":
		into, bit = &e.Reference, 17
	case "channel":
		into, bit = &e.Channel, 18
	default:
		// A key this version does not know.
		return false
	}
	v, ok := d.str()
	*into = v
	return ok && d.once(bit)
}

// counterparty reads the counterparty object into d.cp, or a new one.
func (d *fastDecoder) counterparty(e *Envelope) bool {
	c := d.cp
	if c == nil {
		c = &Counterparty{}
	} else {
		*c = Counterparty{}
	}
	e.Counterparty = c
	return d.nested(func(key string) bool { return d.counterpartyField(c, key) })
}

// decision reads the decision object.
func (d *fastDecoder) decision(e *Envelope) bool {
	dec := &Decision{}
	e.Decision = dec
	return d.nested(func(key string) bool { return d.decisionField(dec, key) })
}

// nested reads an object inside the envelope, its keys counted apart
// from the envelope's.
func (d *fastDecoder) nested(field func(key string) bool) bool {
	outer := d.seen
	d.seen = 0
	ok := d.object(field)
	d.seen = outer
	return ok
}

func (d *fastDecoder) decisionField(dec *Decision, key string) bool {
	switch key {
	case "outcome":
		v, ok := d.str()
		dec.Outcome = Outcome(v)
		return ok && d.once(0)
	case "score":
		num, ok := d.number()
		if !ok || !d.once(1) {
			return false
		}
		f, err := strconv.ParseFloat(num, 64)
		dec.Score = f
		return err == nil
	case "reasons":
		if !d.once(2) || !d.array(func() bool {
			v, ok := d.str()
			dec.Reasons = append(dec.Reasons, v)
			return ok
		}) {
			return false
		}
		if dec.Reasons == nil {
			dec.Reasons = []string{}
		}
		return true
	case "decided_at":
		return d.once(3) && d.time(&dec.DecidedAt)
	case "rule_ids":
		if !d.once(4) || !d.array(func() bool {
			var u UUID
			ok := d.uuid(&u)
			dec.RuleIDs = append(dec.RuleIDs, u)
			return ok
		}) {
			return false
		}
		if dec.RuleIDs == nil {
			dec.RuleIDs = []UUID{}
		}
		return true
	case "latency_ms":
		num, ok := d.number()
		if !ok || !d.once(5) || strings.ContainsAny(num, ".eE") {
			return false
		}
		n, err := strconv.Atoi(num)
		dec.LatencyMS = n
		return err == nil
	case "degraded":
		if !d.once(6) {
			return false
		}
		switch {
		case d.lit("true"):
			dec.Degraded = true
		case d.lit("false"):
		default:
			return false
		}
		return true
	}
	return false
}

// array reads [value, ...], elem reading each value.
func (d *fastDecoder) array(elem func() bool) bool {
	if d.i >= len(d.s) || d.s[d.i] != '[' {
		return false
	}
	d.i++
	d.ws()
	if d.i < len(d.s) && d.s[d.i] == ']' {
		d.i++
		return true
	}
	for {
		d.ws()
		if !elem() {
			return false
		}
		if end, ok := d.afterMember(']'); end || !ok {
			return ok
		}
	}
}

// number reads a JSON number token (scanNumber) as its text.
func (d *fastDecoder) number() (string, bool) {
	end, ok := scanNumber(d.b, d.i)
	if !ok {
		return "", false
	}
	start := d.i
	d.i = end
	return d.s[start:end], true
}

func (d *fastDecoder) counterpartyField(c *Counterparty, key string) bool {
	var into *string
	var bit uint
	switch key {
	case "name":
		into, bit = &c.Name, 0
	case "identifier_kind":
		into, bit = &c.IdentifierKind, 1
	case "identifier_enc":
		into, bit = &c.IdentifierEnc, 2
	case "identifier_masked":
		into, bit = &c.IdentifierMasked, 3
	case "identifier_fp":
		into, bit = &c.IdentifierFP, 4
	case "fingerprint":
		into, bit = &c.Fingerprint, 5
	default:
		return false
	}
	v, ok := d.str()
	*into = v
	return ok && d.once(bit)
}

// lit reads the exact token lit, which must end there.
func (d *fastDecoder) lit(lit string) bool {
	end, ok := scanLiteral(d.b, d.i, lit)
	if !ok || !endsToken(d.b, end) {
		return false
	}
	d.i = end
	return true
}

func (d *fastDecoder) uuid(into *UUID) bool {
	v, ok := d.str()
	if !ok {
		return false
	}
	u, err := ParseUUID(v)
	*into = u
	return err == nil
}

// rawObject returns the object at d.i as its bytes, as they are (the
// library's json.RawMessage). It only finds the object's end
// (skipContainer): normalize checks it as jsonb reads it (CheckJSONB, which
// also makes it valid JSON), and a record it refuses is read again by the
// general path.
func (d *fastDecoder) rawObject() ([]byte, bool) {
	if d.i >= len(d.s) || d.s[d.i] != '{' {
		return nil, false
	}
	start := d.i
	end := skipContainer(d.b, start)
	if end < 0 {
		return nil, false
	}
	d.i = end
	if d.shared {
		return d.b[start:end:end], true
	}
	return []byte(d.s[start:end]), true
}

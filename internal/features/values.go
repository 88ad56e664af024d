package features

// Values is one event's features as computed: each section's figures, kept
// as numbers, built into the maps of doc.go only on demand. The stream's
// rules read a handful of the ~55 features; building every map for every
// event (and collecting them again) would be a quarter of the stream's CPU, so
// rule_eval asks for exactly the features its compiled rules name
// (Feature), and Map builds them all for whoever needs the whole set (the
// decision API, `keep_features`).
type Values struct {
	// txn: a transaction (sections account, customer, counterparty), else
	// an account event (section customer).
	txn                   bool
	account, customer, cp *secVals // nil: no such section (null)
	// secs holds the sections computed for the event (section's order:
	// account, customer, counterparty), so that a batch's features are one
	// allocation (ApplyValues), not one per section and event: those would
	// be four of the stream's objects an event.
	secs [3]secVals
}

// secVals is one section: the figures its map is built from. A section is
// a transaction's or an account event's (tf, ef) or a counterparty's, whose
// window totals are tf.w.
type secVals struct {
	secs byte // secTxn, secEvents, secCP (snapshot.go): the parts present
	tf   txnFeat
	ef   evFeat
}

// cpSec is a counterparty's section with window totals w.
func cpSec(w [4]totals) *secVals { return &secVals{secs: secCP, tf: txnFeat{w: w}} }

// Indexes of Values.secs.
const (
	slotAccount = iota
	slotCustomer
	slotCP
)

// setSec makes section slot of v the one in v.secs, secs its parts present,
// and returns it to be filled in.
func (v *Values) setSec(slot int, secs byte) *secVals {
	sv := &v.secs[slot]
	*sv = secVals{secs: secs}
	switch slot {
	case slotAccount:
		v.account = sv
	case slotCustomer:
		v.customer = sv
	default:
		v.cp = sv
	}
	return sv
}

// section returns the section named name, and whether the event kind has
// such a section at all.
func (v *Values) section(name string) (*secVals, bool) {
	switch name {
	case "account":
		return v.account, v.txn
	case "customer":
		return v.customer, true
	case "counterparty":
		return v.cp, v.txn
	}
	return nil, false
}

// Has reports whether the features hold section name as a value (not null
// or absent).
func (v *Values) Has(name string) bool {
	s, _ := v.section(name)
	return s != nil
}

// Feature returns one feature of section name, as Map would hold it; nil
// when the section or the feature is absent.
func (v *Values) Feature(sec, name string) any {
	s, _ := v.section(sec)
	if s == nil {
		return nil
	}
	return s.get(name)
}

// Map returns every feature, the map of doc.go: {account, customer,
// counterparty} for a transaction, {customer} for an account event.
func (v *Values) Map() map[string]any {
	if !v.txn {
		return map[string]any{"customer": v.customer.m()}
	}
	return map[string]any{"account": v.account.m(), "customer": v.customer.m(), "counterparty": v.cp.m()}
}

// m is the section's map, built by the functions a replay's snapshot uses
// too (feature_maps.go), so both are deep-equal; nil for an absent section.
func (s *secVals) m() any {
	if s == nil {
		return nil
	}
	var m map[string]any
	switch {
	case s.secs&secTxn != 0:
		m = make(map[string]any, 27)
		txnMap(m, &s.tf)
		if s.secs&secEvents != 0 {
			evMap(m, &s.ef)
		}
	case s.secs&secEvents != 0:
		m = make(map[string]any, 5)
		evMap(m, &s.ef)
	case s.secs&secCP != 0:
		m = make(map[string]any, 6)
		cpMap(m, &s.tf.w)
	default:
		m = map[string]any{}
	}
	return m
}

// get is one feature of the section (nil when it has none of that name),
// the value its map holds.
func (s *secVals) get(name string) any {
	if s.secs&secTxn != 0 {
		if v, ok := txnGet(&s.tf, name); ok {
			return v
		}
	}
	if s.secs&secEvents != 0 {
		if v, ok := evGet(&s.ef, name); ok {
			return v
		}
	}
	if s.secs&secCP != 0 {
		if v, ok := cpGet(&s.tf.w, name); ok {
			return v
		}
	}
	return nil
}

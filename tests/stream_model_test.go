package tests

import (
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// The stream tests' reference model: the running totals every account,
// customer and counterparty must end with, computed here from the envelopes
// the test sent, independently of internal/features (which it never calls
// except through its read-only API, to compare). It follows the contract's
// window semantics: windows are bucket-aligned in UTC and relative to the
// entity's head, the latest occurred_at it has seen:
//
//	1h   the head's minute bucket and the 59 before it
//	24h  the head's hour bucket and the 23 before it
//	7d   the head's UTC-day bucket and the 6 before it
//	30d  the head's UTC-day bucket and the 29 before it
//
// Amounts are summed exactly in big.Int units of 0.0001 (numeric(20,4)).

// modelWindow is one feature window: its name and whether an event at t is
// inside it for an entity whose head is head.
type modelWindow struct {
	name   string
	bucket int64 // seconds per bucket
	n      int64 // buckets, the head's included
}

var (
	modelWindows      = []modelWindow{{"1h", 60, 60}, {"24h", 3600, 24}, {"7d", 86400, 7}, {"30d", 86400, 30}}
	modelDistinct     = []modelWindow{{"24h", 3600, 24}, {"30d", 86400, 30}}
	modelEventWindows = []modelWindow{{"1h", 60, 60}, {"24h", 3600, 24}, {"7d", 86400, 7}}
	modelWindow30d    = modelWindow{"30d", 86400, 30}
)

// in reports whether t falls in the window ending at head's bucket.
func (w modelWindow) in(t, head time.Time) bool {
	b, h := floorDiv(t.Unix(), w.bucket), floorDiv(head.Unix(), w.bucket)
	return b <= h && b > h-w.n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// modelUnits parses a decimal amount into units of 0.0001, exactly.
func modelUnits(s string) (*big.Int, error) {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	whole, frac, _ := strings.Cut(s, ".")
	if len(frac) > 4 {
		if strings.Trim(frac[4:], "0") != "" {
			return nil, fmt.Errorf("amount %q has more than 4 decimals", s)
		}
		frac = frac[:4]
	}
	frac += strings.Repeat("0", 4-len(frac))
	if whole == "" {
		whole = "0"
	}
	v, ok := new(big.Int).SetString(whole+frac, 10)
	if !ok {
		return nil, fmt.Errorf("amount %q is not a decimal", s)
	}
	if neg {
		v.Neg(v)
	}
	return v, nil
}

// modelAmount turns what a feature read returned for a sum (json.Number,
// string, integer or nil for nothing) into units of 0.0001.
func modelAmount(v any) (*big.Int, error) {
	switch x := v.(type) {
	case nil:
		return new(big.Int), nil
	case json.Number:
		return modelUnits(x.String())
	case string:
		return modelUnits(x)
	case int64:
		return big.NewInt(x * 10000), nil
	case int:
		return big.NewInt(int64(x) * 10000), nil
	case float64:
		return nil, fmt.Errorf("sum %v is a float: decimals must never be floats", x)
	}
	return nil, fmt.Errorf("sum of type %T", v)
}

// modelInt turns a count feature (int64, int, json.Number, nil) into an int64.
func modelInt(v any) (int64, error) {
	switch x := v.(type) {
	case nil:
		return 0, nil
	case int64:
		return x, nil
	case int:
		return int64(x), nil
	case json.Number:
		return x.Int64()
	case float64:
		if x == float64(int64(x)) {
			return int64(x), nil
		}
	}
	return 0, fmt.Errorf("count %v of type %T", v, v)
}

// modelTxn is one transaction as the model keeps it.
type modelTxn struct {
	id       event.UUID
	at       time.Time
	out      bool
	currency string
	units    *big.Int
	cp       string // counterparty fingerprint, "" for none
	account  string // account external ID
}

// modelEntity is everything one entity has seen.
type modelEntity struct {
	head   time.Time
	seen   map[event.UUID]bool // counted once, as the replay window promises
	txns   []modelTxn
	events []modelAccountEvent
}

type modelAccountEvent struct {
	at  time.Time
	typ string
}

func (e *modelEntity) see(id event.UUID, at time.Time) bool {
	if e.seen[id] {
		return false
	}
	e.seen[id] = true
	if at.After(e.head) {
		e.head = at
	}
	return true
}

// modelKey names an entity: its kind, workspace and natural key.
type modelKey struct {
	kind      string // account, customer, counterparty
	workspace event.UUID
	key       string // account or customer external ID, or fingerprint
}

// streamModel is the model of every entity of a run.
type streamModel struct {
	entities map[modelKey]*modelEntity
}

func newStreamModel() *streamModel { return &streamModel{entities: map[modelKey]*modelEntity{}} }

func (m *streamModel) entity(kind string, ws event.UUID, key string) *modelEntity {
	k := modelKey{kind, ws, key}
	e := m.entities[k]
	if e == nil {
		e = &modelEntity{seen: map[event.UUID]bool{}}
		m.entities[k] = e
	}
	return e
}

// lookup is an entity the model has, or nil.
func (m *streamModel) lookup(kind string, ws event.UUID, key string) *modelEntity {
	return m.entities[modelKey{kind, ws, key}]
}

// apply adds one envelope (a transaction or an account event) to every
// entity it concerns, once per entity and event ID.
func (m *streamModel) apply(e event.Envelope) error {
	if e.Kind == event.KindAccountEvent {
		c := m.entity("customer", e.WorkspaceID, e.CustomerExternalID)
		if c.see(e.ID, e.OccurredAt) {
			c.events = append(c.events, modelAccountEvent{e.OccurredAt, e.Type})
		}
		return nil
	}
	u, err := modelUnits(e.Amount)
	if err != nil {
		return err
	}
	x := modelTxn{id: e.ID, at: e.OccurredAt, out: e.Direction == event.DirectionOut, currency: e.Currency, units: u,
		account: e.AccountExternalID}
	if e.Counterparty != nil {
		x.cp = e.Counterparty.Fingerprint
	}
	if a := m.entity("account", e.WorkspaceID, e.AccountExternalID); a.see(e.ID, e.OccurredAt) {
		a.txns = append(a.txns, x)
	}
	if e.CustomerExternalID != "" {
		if c := m.entity("customer", e.WorkspaceID, e.CustomerExternalID); c.see(e.ID, e.OccurredAt) {
			c.txns = append(c.txns, x)
		}
	}
	// A counterparty's totals are about payments to it: money it sends
	// neither counts nor moves its head.
	if x.cp != "" && x.out {
		if c := m.entity("counterparty", e.WorkspaceID, x.cp); c.see(e.ID, e.OccurredAt) {
			c.txns = append(c.txns, x)
		}
	}
	return nil
}

// modelTotals are an entity's features as of its head, in the names of the
// contract: counts as int64, sums as big.Int units (in the asked currency),
// event counts by type.
type modelTotals map[string]any

// partyTotals are the features an account and a customer share, over the
// entity's transactions, sums in currency.
func (e *modelEntity) partyTotals(currency string) modelTotals {
	out := modelTotals{}
	for _, w := range modelWindows {
		var outN, inN int64
		outSum, inSum := new(big.Int), new(big.Int)
		for _, x := range e.txns {
			if !w.in(x.at, e.head) {
				continue
			}
			if x.out {
				outN++
				if x.currency == currency {
					outSum.Add(outSum, x.units)
				}
			} else {
				inN++
				if x.currency == currency {
					inSum.Add(inSum, x.units)
				}
			}
		}
		out["out_count_"+w.name], out["in_count_"+w.name] = outN, inN
		out["out_sum_"+w.name], out["in_sum_"+w.name] = outSum, inSum
	}
	for _, w := range modelDistinct {
		payees, senders := map[string]bool{}, map[string]bool{}
		for _, x := range e.txns {
			if x.cp == "" || !w.in(x.at, e.head) {
				continue
			}
			if x.out {
				payees[x.cp] = true
			} else {
				senders[x.cp] = true
			}
		}
		out["distinct_payees_"+w.name], out["distinct_senders_"+w.name] = int64(len(payees)), int64(len(senders))
	}
	return out
}

// eventTotals are a customer's account-event features as of its head.
func (e *modelEntity) eventTotals() modelTotals {
	out := modelTotals{}
	for _, w := range modelEventWindows {
		byType := map[string]int64{}
		for _, ev := range e.events {
			if w.in(ev.at, e.head) {
				byType[ev.typ]++
			}
		}
		out["events_"+w.name] = byType
	}
	out["seconds_since_sim_swap"] = e.secondsSince("sim_swap", e.head)
	out["seconds_since_profile_change"] = e.secondsSince("profile_change", e.head)
	return out
}

// secondsSince is the whole seconds from the latest event of typ to at, -1
// when there is none in the 30 d window ending at at.
func (e *modelEntity) secondsSince(typ string, at time.Time) int64 {
	var latest time.Time
	for _, ev := range e.events {
		if ev.typ == typ && ev.at.After(latest) {
			latest = ev.at
		}
	}
	if latest.IsZero() || !modelWindow30d.in(latest, at) {
		return -1
	}
	// Whole seconds of each, as the totals keep them.
	return at.Unix() - latest.Unix()
}

// counterpartyTotals are a counterparty's features as of its head.
func (e *modelEntity) counterpartyTotals(currency string) modelTotals {
	out := modelTotals{}
	for _, w := range modelDistinct {
		var n int64
		sum := new(big.Int)
		payers := map[string]bool{}
		for _, x := range e.txns {
			if !x.out || !w.in(x.at, e.head) {
				continue
			}
			n++
			payers[x.account] = true
			if x.currency == currency {
				sum.Add(sum, x.units)
			}
		}
		out["paid_count_"+w.name], out["paid_sum_"+w.name], out["distinct_payers_"+w.name] = n, sum, int64(len(payers))
	}
	return out
}

// currencies are the currencies of the entity's transactions, sorted.
func (e *modelEntity) currencies() []string {
	set := map[string]bool{}
	for _, x := range e.txns {
		set[x.currency] = true
	}
	if len(set) == 0 {
		set["EUR"] = true
	}
	var out []string
	for c := range set {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// diffTotals compares what a read returned with the model, feature by
// feature (only the model's features: a read may return more), and
// describes every difference. scale multiplies the model's counts and sums
// (2 for a replay beyond the window, which counts everything twice).
func diffTotals(what string, want modelTotals, got map[string]any, scale int64) []string {
	var diffs []string
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		w, g := want[k], got[k]
		switch wv := w.(type) {
		case int64:
			if strings.HasPrefix(k, "seconds_since_") || strings.HasPrefix(k, "distinct_") {
				// Not counts of events: a replay changes neither.
				gv, err := modelInt(g)
				if err != nil || gv != wv {
					diffs = append(diffs, fmt.Sprintf("%s %s = %v, want %d", what, k, g, wv))
				}
				continue
			}
			gv, err := modelInt(g)
			if err != nil || gv != wv*scale {
				diffs = append(diffs, fmt.Sprintf("%s %s = %v, want %d", what, k, g, wv*scale))
			}
		case *big.Int:
			gv, err := modelAmount(g)
			want := new(big.Int).Mul(wv, big.NewInt(scale))
			if err != nil || gv.Cmp(want) != 0 {
				diffs = append(diffs, fmt.Sprintf("%s %s = %v, want %s (units of 0.0001; %v)", what, k, g, want, err))
			}
		case map[string]int64:
			gm, _ := g.(map[string]any)
			for typ, n := range wv {
				gv, err := modelInt(gm[typ])
				if err != nil || gv != n*scale {
					diffs = append(diffs, fmt.Sprintf("%s %s.%s = %v, want %d", what, k, typ, gm[typ], n*scale))
				}
			}
			for typ, v := range gm {
				if _, ok := wv[typ]; !ok {
					if n, err := modelInt(v); err != nil || n != 0 {
						diffs = append(diffs, fmt.Sprintf("%s %s.%s = %v, want none", what, k, typ, v))
					}
				}
			}
		}
	}
	return diffs
}

// modelFormat shows units of 0.0001 as a decimal, for logs.
func modelFormat(u *big.Int) string {
	s := u.String()
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for len(s) < 5 {
		s = "0" + s
	}
	out := s[:len(s)-4] + "." + s[len(s)-4:]
	if neg {
		out = "-" + out
	}
	return out
}

// The rules the exactness tests apply to every workspace: realistic, and
// each reading only features whose value at the moment of evaluation the
// test can recompute whatever the order partitions are read in: an
// account's own totals (its transactions share a partition, in order), a
// customer's SIM-swap time and account-event counts while only account
// events are flowing (they share the customer's partition), all account
// events being applied before any transaction.
var proofRules = []proofRule{
	{name: "t_velocity_out_1h", appliesTo: "transaction", alert: false,
		expr: `event.direction == "out" && features.account.out_count_1h >= 3`},
	{name: "t_large_to_new_payee", appliesTo: "transaction", alert: true,
		expr: `event.direction == "out" && event.amount >= 5000 && features.account.new_counterparty`},
	{name: "t_sim_swap_then_transfer", appliesTo: "transaction", alert: true,
		expr: `event.direction == "out" && event.amount >= 1000 && features.customer.seconds_since_sim_swap > 0 && features.customer.seconds_since_sim_swap <= 3600`},
	{name: "t_failed_otp_burst", appliesTo: "account_event", alert: true,
		expr: `event.type == "failed_otp" && (features.customer.events_1h.failed_otp | 0) >= 3`},
}

type proofRule struct {
	name, appliesTo, expr string
	alert                 bool
}

// proofHit is one rule firing on one event.
type proofHit struct {
	rule  string
	event event.UUID
}

// predictHits recomputes which of proofRules fire on which event, from the
// events in the order the stream reads them: every account event first
// (each customer's in the order sent), then the transactions (each
// account's in the order sent). Features are those right after the event
// was applied, as the contract says.
func predictHits(events, txns []event.Envelope) (map[proofHit]bool, error) {
	hits := map[proofHit]bool{}
	type custState struct {
		head    int64 // unix seconds
		events  []modelAccountEvent
		simSwap int64 // latest sim_swap, unix seconds; 0 none
	}
	customers := map[modelKey]*custState{}
	for _, e := range events {
		k := modelKey{"customer", e.WorkspaceID, e.CustomerExternalID}
		c := customers[k]
		if c == nil {
			c = &custState{}
			customers[k] = c
		}
		c.head = max(c.head, e.OccurredAt.Unix())
		c.events = append(c.events, modelAccountEvent{e.OccurredAt, e.Type})
		if e.Type == "sim_swap" {
			c.simSwap = max(c.simSwap, e.OccurredAt.Unix())
		}
		if e.Type != "failed_otp" {
			continue
		}
		head := time.Unix(c.head, 0)
		n := 0
		for _, ev := range c.events {
			if ev.typ == "failed_otp" && modelWindows[0].in(ev.at, head) {
				n++
			}
		}
		if n >= 3 {
			hits[proofHit{"t_failed_otp_burst", e.ID}] = true
		}
	}

	type accState struct {
		head int64
		txns []modelTxn
	}
	accounts := map[modelKey]*accState{}
	for _, e := range txns {
		k := modelKey{"account", e.WorkspaceID, e.AccountExternalID}
		a := accounts[k]
		if a == nil {
			a = &accState{}
			accounts[k] = a
		}
		u, err := modelUnits(e.Amount)
		if err != nil {
			return nil, err
		}
		x := modelTxn{id: e.ID, at: e.OccurredAt, out: e.Direction == event.DirectionOut, currency: e.Currency, units: u}
		if e.Counterparty != nil {
			x.cp = e.Counterparty.Fingerprint
		}
		a.head = max(a.head, e.OccurredAt.Unix())
		head := time.Unix(a.head, 0)
		// new_counterparty: no earlier transaction of the account with this
		// counterparty, either way, in the 30 d window of the head.
		newCP := x.cp != ""
		for _, p := range a.txns {
			if p.cp == x.cp && modelWindow30d.in(p.at, head) {
				newCP = false
			}
		}
		a.txns = append(a.txns, x)
		outs := 0
		for _, p := range a.txns {
			if p.out && modelWindows[0].in(p.at, head) {
				outs++
			}
		}
		if !x.out {
			continue
		}
		if outs >= 3 {
			hits[proofHit{"t_velocity_out_1h", e.ID}] = true
		}
		if u.Cmp(big.NewInt(5000*10000)) >= 0 && newCP {
			hits[proofHit{"t_large_to_new_payee", e.ID}] = true
		}
		// seconds_since_sim_swap: the latest SIM swap (every account event
		// is in already) to this transaction, 0 when the swap is later.
		ck := modelKey{"customer", e.WorkspaceID, e.CustomerExternalID}
		if c := customers[ck]; c != nil && c.simSwap != 0 && u.Cmp(big.NewInt(1000*10000)) >= 0 {
			since := e.OccurredAt.Unix() - c.simSwap
			if since > 0 && since <= 3600 {
				hits[proofHit{"t_sim_swap_then_transfer", e.ID}] = true
			}
		}
	}
	return hits, nil
}

// The model's own check, against figures worked out by hand: windows are
// bucket-aligned on the head, sums exact, each event once.
func TestStreamModelByHand(t *testing.T) {
	t.Parallel()
	ws := event.UUID{1}
	head := time.Date(2026, 11, 30, 12, 30, 10, 0, time.UTC)
	txn := func(n int, at time.Time, dir event.Direction, amount, cp string) event.Envelope {
		e := event.Envelope{Kind: event.KindTransaction, WorkspaceID: ws, ID: event.UUID{byte(n)}, OccurredAt: at,
			AccountExternalID: "a", CustomerExternalID: "c", Amount: amount, Currency: "EUR", Direction: dir}
		if cp != "" {
			e.Counterparty = &event.Counterparty{Fingerprint: cp}
		}
		return e
	}
	m := newStreamModel()
	for _, e := range []event.Envelope{
		txn(1, head, event.DirectionOut, "0.10", "p1"),
		txn(2, time.Date(2026, 11, 30, 11, 31, 59, 0, time.UTC), event.DirectionOut, "0.20", "p2"), // minute 11:31: the 59th before 12:30
		txn(3, time.Date(2026, 11, 30, 11, 30, 59, 0, time.UTC), event.DirectionOut, "0.3", "p1"),  // 11:30: outside 1h
		txn(4, time.Date(2026, 11, 29, 13, 0, 0, 0, time.UTC), event.DirectionIn, "1000000000.0001", "p3"),
		txn(5, time.Date(2026, 11, 29, 12, 59, 59, 0, time.UTC), event.DirectionIn, "1", ""), // hour 12 of the 29th: outside 24h
		txn(5, time.Date(2026, 11, 29, 12, 59, 59, 0, time.UTC), event.DirectionIn, "1", ""), // the same ID again: once
		txn(6, time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC), event.DirectionOut, "5", "p4"),  // day 1: the 29th day before the 30th
		txn(7, time.Date(2026, 10, 31, 23, 59, 59, 0, time.UTC), event.DirectionOut, "7", "p5"),
		{Kind: event.KindAccountEvent, WorkspaceID: ws, ID: event.UUID{8}, OccurredAt: head.Add(-90 * time.Minute), CustomerExternalID: "c", Type: "sim_swap"},
	} {
		if err := m.apply(e); err != nil {
			t.Fatal(err)
		}
	}
	acc := m.lookup("account", ws, "a").partyTotals("EUR")
	units := func(s string) *big.Int { u, _ := modelUnits(s); return u }
	want := modelTotals{
		"out_count_1h": int64(2), "out_sum_1h": units("0.3"), "out_count_24h": int64(3), "in_count_24h": int64(1),
		"in_sum_24h": units("1000000000.0001"), "in_count_7d": int64(2), "out_count_30d": int64(4), "out_sum_30d": units("5.6"),
		"distinct_payees_24h": int64(2), "distinct_payees_30d": int64(3), "distinct_senders_30d": int64(1),
	}
	got := map[string]any{}
	for k, v := range acc {
		if b, ok := v.(*big.Int); ok {
			got[k] = json.Number(modelFormat(b))
		} else {
			got[k] = v
		}
	}
	if d := diffTotals("account", want, got, 1); len(d) > 0 {
		t.Fatalf("model by hand:\n%s", strings.Join(d, "\n"))
	}
	cust := m.lookup("customer", ws, "c")
	if s := cust.eventTotals()["seconds_since_sim_swap"]; s != int64(5400) {
		t.Fatalf("seconds_since_sim_swap %v, want 5400", s)
	}
	if e := cust.eventTotals()["events_1h"].(map[string]int64); len(e) != 0 {
		t.Fatalf("events_1h %v, want none (the swap is 90 minutes before the head)", e)
	}
}

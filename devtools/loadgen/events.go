package loadgen

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// Account event types the generator makes, the names rules count
// (features.customer.events_1h.<type>).
const (
	EventSignIn        = "sign_in"
	EventFailedOTP     = "failed_otp"
	EventNewDevice     = "new_device"
	EventSIMSwap       = "sim_swap"
	EventProfileChange = "profile_change"
)

// Account events come in two sorts. Most are the everyday background of a
// bank's customers (regularEventTypes, at these frequencies), on random
// customers at their place in time. One block of incidentStride events in
// every block is an incident instead: a short burst on one customer (several
// failed one-time codes, a SIM swap, a new device, a profile change) that a
// few large transfers out of that customer's account to a mule account then
// follow, the patterns the starter rules look for.
var regularEventTypes = []struct {
	typ  string
	upTo float64 // cumulative share
}{
	{EventSignIn, 0.82},
	{EventFailedOTP, 0.90},
	{EventNewDevice, 0.96},
	{EventProfileChange, 0.99},
	{EventSIMSwap, 1},
}

const (
	// incidentStride: events k·incidentStride … of block k start incident k.
	incidentStride = 25
	// maxFollowUps is the most transfers one incident is followed by.
	maxFollowUps = 3
	// eventLateness is how late an everyday account event may arrive; an
	// incident's events are never late, so their order is the burst's.
	eventLateness = 10 * time.Minute
	// mulesPerWorkspace is the size of each workspace's pool of mule
	// recipients: few, so one is paid by many accounts.
	mulesPerWorkspace = 8
)

// incident is one burst of account events on a customer and the transfers
// that follow it.
type incident struct {
	kind     string // failed_otp, sim_swap, new_device, profile_change
	customer int    // customer index: accounts 2·customer and 2·customer+1
	account  int    // the account the transfers leave from
	at       time.Time
	events   []incidentEvent
	// followUps are the transfers' offsets after at, in order.
	followUps []time.Duration
}

type incidentEvent struct {
	typ   string
	after time.Duration // after the incident's start
}

// Random streams of account events (beside the transaction domains).
const (
	domainEvent uint64 = iota + 0x6c70
	domainIncident
	domainFollowUp
	domainMule
)

// EventExternalIDPrefix starts the external_id of every account event of
// the generator.
func (g *Generator) EventExternalIDPrefix() string {
	return "lge-" + strconv.FormatUint(g.cfg.Seed, 36) + "-"
}

// EventExternalID is account event i's external_id.
func (g *Generator) EventExternalID(i int) string {
	return g.EventExternalIDPrefix() + strconv.Itoa(i)
}

// EventKey is the Kafka key of an account event: workspace_id:
// customer_external_id, so one customer's events stay in order.
func EventKey(e event.Envelope) string {
	return e.WorkspaceID.String() + ":" + e.CustomerExternalID
}

// incidents is how many incidents AccountEvents events hold.
func (g *Generator) incidents() int { return g.cfg.AccountEvents / incidentStride }

// incident k, a function of the seed and k only.
func (g *Generator) incident(k int) incident {
	r := rng(g.cfg.Seed, domainIncident, uint64(k))
	customers := g.cfg.Accounts / 2
	inc := incident{customer: r.IntN(customers)}
	inc.account = 2*inc.customer + r.IntN(2)
	inc.at = g.spreadAt(k*incidentStride, g.cfg.AccountEvents)
	var after time.Duration
	add := func(typ string, gap time.Duration) {
		after += gap
		inc.events = append(inc.events, incidentEvent{typ: typ, after: after})
	}
	seconds := func(lo, hi int) time.Duration { return time.Duration(lo+r.IntN(hi-lo+1)) * time.Second }
	followUps := 1
	switch u := r.Float64(); {
	case u < 0.40:
		// Someone guessing one-time codes, then getting in.
		inc.kind = EventFailedOTP
		for range 3 + r.IntN(4) {
			add(EventFailedOTP, seconds(10, 40))
		}
		add(EventSignIn, seconds(20, 60))
		followUps = 1 + r.IntN(2)
	case u < 0.65:
		// The phone number moved to a new SIM, then a sign-in from it.
		inc.kind = EventSIMSwap
		add(EventSIMSwap, 0)
		add(EventSignIn, seconds(120, 600))
		followUps = 1 + r.IntN(maxFollowUps)
	case u < 0.90:
		inc.kind = EventNewDevice
		add(EventNewDevice, 0)
		add(EventSignIn, seconds(5, 30))
	default:
		inc.kind = EventProfileChange
		add(EventSignIn, 0)
		add(EventProfileChange, seconds(30, 180))
		followUps = 1 + r.IntN(2)
	}
	// Each transfer a minute or two after the last event or transfer.
	for range followUps {
		after += seconds(45, 120)
		inc.followUps = append(inc.followUps, after)
	}
	return inc
}

// followUpStart is the first transaction index incident k's transfers
// take: the transaction at the incident's place in the transaction stream.
func (g *Generator) followUpStart(k int) int {
	return int(int64(k) * incidentStride * int64(g.cfg.Count) / int64(g.cfg.AccountEvents))
}

// followUpOf reports whether transaction i is a transfer following an
// incident, and which one and which of its transfers.
func (g *Generator) followUpOf(i int) (k, j int, ok bool) {
	n := g.incidents()
	if n == 0 || g.cfg.Count == 0 {
		return 0, 0, false
	}
	// The largest k with followUpStart(k) <= i: k·stride·Count < (i+1)·AE.
	num, den := int64(i+1)*int64(g.cfg.AccountEvents), int64(incidentStride)*int64(g.cfg.Count)
	k = int((num+den-1)/den) - 1
	if k < 0 || k >= n {
		return 0, 0, false
	}
	j = i - g.followUpStart(k)
	// Never more transfers than transactions before the next incident's.
	room := g.cfg.Count - g.followUpStart(k)
	if k+1 < n {
		room = g.followUpStart(k+1) - g.followUpStart(k)
	}
	if j >= min(maxFollowUps, room) {
		return 0, 0, false
	}
	if inc := g.incident(k); j < len(inc.followUps) {
		return k, j, true
	}
	return 0, 0, false
}

// followUp makes transaction i, transfer j of incident k: out of the
// incident's account, to a mule, for thousands.
func (g *Generator) followUp(i, k, j int) event.Envelope {
	inc := g.incident(k)
	r := rng(g.cfg.Seed, domainFollowUp, uint64(i))
	acc := &g.accounts[inc.account]
	mules := g.mules[acc.WorkspaceIndex]
	cp := mules[r.IntN(len(mules))].cp
	e := event.Envelope{
		V:                  event.Version,
		Kind:               event.KindTransaction,
		WorkspaceID:        acc.Workspace,
		ExternalID:         g.ExternalID(i),
		OccurredAt:         inc.at.Add(inc.followUps[j]).UTC().Truncate(time.Millisecond),
		CustomerExternalID: acc.CustomerExternalID,
		AccountExternalID:  acc.ExternalID,
		Amount:             fmt.Sprintf("%d.%02d", 1500+r.IntN(8000), r.IntN(100)),
		Currency:           "EUR",
		Direction:          event.DirectionOut,
		Status:             "completed",
		Type:               "transfer",
		Channel:            "online",
		Counterparty:       &cp,
		Metadata:           g.metadata,
	}
	e.Reference = fmt.Sprintf("INV-%d-%05d", e.OccurredAt.Year(), r.IntN(100000))
	e.ID = event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	return e
}

// AccountEvent returns account event i (ReceivedAt left zero). Like
// Envelope it depends only on the Config and i.
func (g *Generator) AccountEvent(i int) event.Envelope {
	var (
		cust int
		typ  string
		at   time.Time
		r    = rng(g.cfg.Seed, domainEvent, uint64(i))
	)
	k, off := i/incidentStride, i%incidentStride
	if inc := g.incident(k); k < g.incidents() && off < len(inc.events) {
		cust, typ = inc.customer, inc.events[off].typ
		at = inc.at.Add(inc.events[off].after)
	} else {
		cust = r.IntN(g.cfg.Accounts / 2)
		u := r.Float64()
		for _, t := range regularEventTypes {
			if u < t.upTo {
				typ = t.typ
				break
			}
		}
		at = g.spreadAt(i, g.cfg.AccountEvents).Add(-time.Duration(r.Float64() * float64(min(eventLateness, g.cfg.Spread))))
	}
	acc := &g.accounts[2*cust]
	e := event.Envelope{
		V:                  event.Version,
		Kind:               event.KindAccountEvent,
		WorkspaceID:        acc.Workspace,
		ExternalID:         g.EventExternalID(i),
		OccurredAt:         at.UTC().Truncate(time.Millisecond),
		CustomerExternalID: acc.CustomerExternalID,
		Type:               typ,
		Attributes:         eventAttributes(r, typ),
	}
	// Sign-ins and failed codes happen on an account's app; the others are
	// about the customer.
	if typ == EventSignIn || typ == EventFailedOTP {
		e.AccountExternalID = g.accounts[2*cust+r.IntN(2)].ExternalID
	}
	e.ID = event.AccountEventID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	return e
}

// eventAttributes are the few details a bank sends with an event.
func eventAttributes(r *rand.Rand, typ string) json.RawMessage {
	a := map[string]any{"ip_country": pick(r, []string{"DE", "DE", "DE", "DE", "AT", "NL", "FR", "GB"})}
	switch typ {
	case EventSignIn, EventFailedOTP, EventNewDevice:
		a["device"] = pick(r, []string{"ios", "android", "web"})
	case EventSIMSwap:
		a["carrier"] = pick(r, []string{"Telekom", "Vodafone", "O2"})
	case EventProfileChange:
		a["field"] = pick(r, []string{"phone", "email", "address"})
	}
	b, _ := json.Marshal(a) // a map of strings always marshals
	return b
}

// EventRecord is account event i as it goes to Kafka, received at
// receivedAt.
func (g *Generator) EventRecord(i int, receivedAt time.Time) (key string, value []byte, id event.UUID, err error) {
	e := g.AccountEvent(i)
	e.ReceivedAt = receivedAt.UTC()
	value, err = event.Encode(e)
	if err != nil {
		return "", nil, event.UUID{}, fmt.Errorf("encoding account event %d: %w", i, err)
	}
	return EventKey(e), value, e.ID, nil
}

// spreadAt is the place of item i of n in the stream's time span.
func (g *Generator) spreadAt(i, n int) time.Time {
	at := g.cfg.Start
	if n > 0 {
		frac := float64(i) / float64(n)
		at = at.Add(-g.cfg.Spread + time.Duration(frac*float64(g.cfg.Spread)))
	}
	return at
}

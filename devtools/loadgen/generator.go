package loadgen

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// Sentinel errors of the package.
var (
	// ErrInvalidConfig: a Config field is out of range; the message names
	// the field and the range.
	ErrInvalidConfig = errors.New("invalid load generator setting")
	// ErrNotAcknowledged: Kafka did not acknowledge some records; the
	// message says how many and wraps the first failure.
	ErrNotAcknowledged = errors.New("records not acknowledged by Kafka")
)

// Defaults of Config, also the defaults of `speculapro loadgen`'s flags.
const (
	DefaultCount              = 100000
	DefaultAccounts           = 20000
	DefaultWorkspaces         = 4
	DefaultCounterparties     = 5000
	DefaultKnownAccountsRatio = 0.3
	DefaultLinkedRatio        = 0.02
	DefaultSpread             = 72 * time.Hour
	// MaxSpread keeps every occurred_at inside the partitions `speculapro
	// migrate` creates (from last month on): with an hour of lateness on
	// top, two weeks back never leaves them.
	MaxSpread = 14 * 24 * time.Hour
)

// lateness is how far behind its place in the stream a transaction's
// occurred_at may be: customer systems send late, and a persister must not
// rely on arrival order being time order.
const lateness = time.Hour

// Config says what a Generator makes. The same Config (Start included) makes
// the same transactions, IDs and keys; only the ciphertexts differ between
// two generators, because AES-GCM seals with a random nonce.
type Config struct {
	Seed  uint64
	Count int // transactions 0..Count-1
	// Accounts are spread over Workspaces; customers own two accounts each.
	Accounts   int
	Workspaces int
	// Counterparties is the size of the pool recipients are drawn from,
	// shared out between the workspaces. Draws are heavy-headed (Zipf), so
	// a few recipients are paid very often and most rarely.
	Counterparties int
	// KnownAccountsRatio is the share of customers (and their accounts)
	// that are real records seeded into PostgreSQL before the load
	// (SeedKnown); the rest reach the database as placeholders.
	KnownAccountsRatio float64
	// LinkedRatio is the share of pool counterparties whose IBAN is a known
	// account's own, so the persister can link them to it.
	LinkedRatio float64
	// Start is the occurred_at of the stream's end: transaction i happens
	// around Start - Spread + i/Count·Spread, up to an hour late.
	Start  time.Time
	Spread time.Duration
	// AccountEvents is the number of account events 0..AccountEvents-1
	// (AccountEvent) over the same customers and time span. With none,
	// transactions are exactly what they are without account events; with
	// some, a few transactions become the transfers that follow an
	// incident (see events.go).
	AccountEvents int
}

// Validate checks every field's range.
func (c Config) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case c.Count < 0:
		return bad("count %d: want 0 or more", c.Count)
	case c.AccountEvents < 0:
		return bad("account events %d: want 0 or more", c.AccountEvents)
	case c.Workspaces < 1:
		return bad("workspaces %d: want at least 1", c.Workspaces)
	case c.Accounts < 2*c.Workspaces:
		return bad("accounts %d: want at least two per workspace (%d)", c.Accounts, 2*c.Workspaces)
	case c.Counterparties < c.Workspaces:
		return bad("counterparties %d: want at least one per workspace (%d)", c.Counterparties, c.Workspaces)
	case c.KnownAccountsRatio < 0 || c.KnownAccountsRatio > 1 || math.IsNaN(c.KnownAccountsRatio):
		return bad("known accounts ratio %v: want 0 to 1", c.KnownAccountsRatio)
	case c.LinkedRatio < 0 || c.LinkedRatio > 1 || math.IsNaN(c.LinkedRatio):
		return bad("linked counterparties ratio %v: want 0 to 1", c.LinkedRatio)
	case c.Spread < 0 || c.Spread > MaxSpread:
		return bad("spread %s: want 0 to %s", c.Spread, MaxSpread)
	case c.Start.IsZero():
		return bad("start time missing")
	}
	return nil
}

// Account is one monitored account of the generated population.
type Account struct {
	Workspace          event.UUID
	WorkspaceIndex     int
	ExternalID         string
	CustomerExternalID string
	CustomerName       string
	// Known accounts (and their customers) are seeded as real records;
	// only they carry a protected Number, as the real account records
	// would.
	Known  bool
	Number identity.Protected

	iban string // clear; never leaves the package
}

// ID is the account's deterministic row ID.
func (a Account) ID() event.UUID { return event.AccountID(a.Workspace, a.ExternalID) }

// CustomerID is the deterministic row ID of the account's customer.
func (a Account) CustomerID() event.UUID { return event.CustomerID(a.Workspace, a.CustomerExternalID) }

// poolEntry is one recipient of a workspace's counterparty pool.
type poolEntry struct {
	cp      event.Counterparty // encrypted, masked and fingerprinted once
	typ     string             // transaction type paying this recipient
	clear   string             // clear identifier; "" for a merchant known by name
	linked  int                // index of the known account whose IBAN this is, or -1
	channel [2]string          // the usual channel, and the occasional other one
}

// Generator makes transaction envelopes. Envelope(i) depends only on the
// Config and i, so transactions can be made (or re-made, to check what
// reached the database) in any order and from many goroutines. A Generator
// is safe for concurrent use.
type Generator struct {
	cfg        Config
	workspaces []event.UUID
	accounts   []Account
	pools      [][]poolEntry // by workspace index
	mules      [][]poolEntry // by workspace index; only with account events
	metadata   json.RawMessage
}

// Random streams: each draw sequence has its own domain, so adding a draw
// to one never shifts another.
const (
	domainTxn uint64 = iota + 0x6c67 // "lg"
	domainKnown
	domainIBAN
	domainPool
	domainName
)

// New builds the population (workspaces, accounts, the counterparty pools)
// and protects its identifiers with p.
func New(cfg Config, p *identity.Protector) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	g := &Generator{
		cfg:      cfg,
		metadata: json.RawMessage(fmt.Sprintf(`{"source":"loadgen","seed":%d}`, cfg.Seed)),
	}
	for w := range cfg.Workspaces {
		g.workspaces = append(g.workspaces, workspaceID(cfg.Seed, w))
	}

	knownByWorkspace := make([][]int, cfg.Workspaces)
	g.accounts = make([]Account, cfg.Accounts)
	for a := range g.accounts {
		// Two accounts per customer, in the customer's workspace.
		cust := a / 2
		w := cust % cfg.Workspaces
		acc := Account{
			Workspace:          g.workspaces[w],
			WorkspaceIndex:     w,
			ExternalID:         fmt.Sprintf("acc-%06d", a),
			CustomerExternalID: fmt.Sprintf("cust-%06d", cust),
			CustomerName:       personName(rng(cfg.Seed, domainName, uint64(cust))),
			Known:              unit(cfg.Seed, domainKnown, uint64(cust)) < cfg.KnownAccountsRatio,
			iban:               domesticIBAN(rng(cfg.Seed, domainIBAN, uint64(a))),
		}
		if acc.Known {
			prot, err := p.Protect(acc.Workspace, identity.FieldAccountNumber, identity.KindIBAN, acc.iban)
			if err != nil {
				return nil, fmt.Errorf("protecting the IBAN of account %s: %w", acc.ExternalID, err)
			}
			acc.Number = prot
			knownByWorkspace[w] = append(knownByWorkspace[w], a)
		}
		g.accounts[a] = acc
	}

	g.pools = make([][]poolEntry, cfg.Workspaces)
	for w := range g.pools {
		n := cfg.Counterparties / cfg.Workspaces
		if w < cfg.Counterparties%cfg.Workspaces {
			n++
		}
		g.pools[w] = make([]poolEntry, n)
		for j := range g.pools[w] {
			e, err := g.poolEntry(p, w, j, knownByWorkspace[w])
			if err != nil {
				return nil, err
			}
			g.pools[w][j] = e
		}
	}
	if cfg.AccountEvents > 0 {
		g.mules = make([][]poolEntry, cfg.Workspaces)
		for w := range g.mules {
			for j := range mulesPerWorkspace {
				e, err := g.muleEntry(p, w, j)
				if err != nil {
					return nil, err
				}
				g.mules[w] = append(g.mules[w], e)
			}
		}
	}
	return g, nil
}

// muleEntry makes mule j of workspace w: a person paid by IBAN, outside the
// everyday pool, so paying one is new for the account.
func (g *Generator) muleEntry(p *identity.Protector, w, j int) (poolEntry, error) {
	r := rng(g.cfg.Seed, domainMule, uint64(w)<<32|uint64(j))
	e := poolEntry{linked: -1, typ: "transfer", channel: [2]string{"online", "online"}, clear: foreignOrDomesticIBAN(r)}
	e.cp.Name = personName(r)
	prot, err := p.Protect(g.workspaces[w], identity.FieldCounterpartyIdentifier, identity.KindIBAN, e.clear)
	if err != nil {
		return poolEntry{}, fmt.Errorf("protecting mule %d of workspace %d: %w", j, w, err)
	}
	e.cp.IdentifierKind, e.cp.IdentifierEnc = string(prot.Kind), prot.Enc
	e.cp.IdentifierMasked, e.cp.IdentifierFP = prot.Masked, prot.FP
	e.cp.Fingerprint = p.Fingerprints.Counterparty(g.workspaces[w], e.cp.IdentifierFP, e.cp.Name)
	return e, nil
}

// poolEntry makes recipient j of workspace w: a known account's own IBAN
// (LinkedRatio of them), else a person or company paid by IBAN, a domestic
// account number, a phone wallet, or a card merchant known only by name.
func (g *Generator) poolEntry(p *identity.Protector, w, j int, known []int) (poolEntry, error) {
	r := rng(g.cfg.Seed, domainPool, uint64(w)<<32|uint64(j))
	e := poolEntry{linked: -1, typ: "transfer", channel: [2]string{"online", "branch"}}
	var kind identity.Kind
	switch u := r.Float64(); {
	case len(known) > 0 && u < g.cfg.LinkedRatio:
		e.linked = known[r.IntN(len(known))]
		kind, e.clear = identity.KindIBAN, g.accounts[e.linked].iban
		e.cp.Name = g.accounts[e.linked].CustomerName
	case u < 0.55:
		kind, e.clear = identity.KindIBAN, foreignOrDomesticIBAN(r)
		e.cp.Name = partyName(r)
	case u < 0.70:
		kind, e.clear = identity.KindAccountNumber, sortCodeAccount(r)
		e.cp.Name = partyName(r)
	case u < 0.78:
		kind, e.clear = identity.KindPhone, mobileNumber(r)
		e.cp.Name = personName(r)
		e.typ, e.channel = "wallet", [2]string{"mobile", "online"}
	default:
		e.cp.Name = merchantName(r, j)
		e.typ, e.channel = "card", [2]string{"pos", "online"}
	}
	if kind != "" {
		prot, err := p.Protect(g.workspaces[w], identity.FieldCounterpartyIdentifier, kind, e.clear)
		if err != nil {
			return poolEntry{}, fmt.Errorf("protecting counterparty %d of workspace %d: %w", j, w, err)
		}
		e.cp.IdentifierKind, e.cp.IdentifierEnc = string(prot.Kind), prot.Enc
		e.cp.IdentifierMasked, e.cp.IdentifierFP = prot.Masked, prot.FP
	}
	e.cp.Fingerprint = p.Fingerprints.Counterparty(g.workspaces[w], e.cp.IdentifierFP, e.cp.Name)
	return e, nil
}

// Config returns the generator's configuration.
func (g *Generator) Config() Config { return g.cfg }

// Workspaces returns the workspace IDs, derived from the seed.
func (g *Generator) Workspaces() []event.UUID { return append([]event.UUID(nil), g.workspaces...) }

// Accounts returns the account population; index i is account "acc-<i>".
func (g *Generator) Accounts() []Account { return append([]Account(nil), g.accounts...) }

// Key is the Kafka key of a transaction: workspace_id:account_external_id,
// so one account's transactions share a partition and stay in order.
func Key(e event.Envelope) string {
	return e.WorkspaceID.String() + ":" + e.AccountExternalID
}

// ExternalIDPrefix starts the external_id of every transaction of the
// generator: the seed is part of it, so two runs with different seeds never
// collide in a shared workspace, and a query can select one run's rows.
func (g *Generator) ExternalIDPrefix() string {
	return "lg-" + strconv.FormatUint(g.cfg.Seed, 36) + "-"
}

// ExternalID is transaction i's external_id.
func (g *Generator) ExternalID(i int) string {
	return g.ExternalIDPrefix() + strconv.Itoa(i)
}

// Envelope returns transaction i (ReceivedAt left zero: the producer stamps
// it, as the ingest API does on acceptance). With account events, a few
// transactions are the transfers following an incident instead.
func (g *Generator) Envelope(i int) event.Envelope {
	if k, j, ok := g.followUpOf(i); ok {
		return g.followUp(i, k, j)
	}
	r := rng(g.cfg.Seed, domainTxn, uint64(i))
	acc := &g.accounts[r.IntN(len(g.accounts))]

	e := event.Envelope{
		V:                  event.Version,
		Kind:               event.KindTransaction,
		WorkspaceID:        acc.Workspace,
		ExternalID:         g.ExternalID(i),
		OccurredAt:         g.occurredAt(i, r),
		CustomerExternalID: acc.CustomerExternalID,
		AccountExternalID:  acc.ExternalID,
		Amount:             amount(r),
		Currency:           pick(r, []string{"EUR", "EUR", "EUR", "EUR", "EUR", "EUR", "EUR", "EUR", "GBP", "USD"}),
		Direction:          event.DirectionOut,
		Status:             "completed",
		Metadata:           g.metadata,
	}
	if r.Float64() < 0.25 {
		e.Direction = event.DirectionIn
	}
	if r.Float64() < 0.03 {
		e.Status = "pending"
	}
	if r.Float64() < 0.04 {
		// Cash at a cash machine: there is no one on the other side.
		e.Type, e.Channel = "cash", "atm"
		e.Direction = event.DirectionOut
	} else {
		pool := g.pools[acc.WorkspaceIndex]
		pe := &pool[zipf(r, len(pool))]
		cp := pe.cp
		e.Counterparty = &cp
		e.Type, e.Channel = pe.typ, pe.channel[0]
		if r.Float64() < 0.2 {
			e.Channel = pe.channel[1]
		}
		if pe.typ == "transfer" {
			e.Reference = fmt.Sprintf("INV-%d-%05d", e.OccurredAt.Year(), r.IntN(100000))
		}
	}
	e.ID = event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt)
	return e
}

// occurredAt places transaction i in the stream, up to an hour late.
func (g *Generator) occurredAt(i int, r *rand.Rand) time.Time {
	at := g.cfg.Start
	if g.cfg.Count > 0 {
		frac := float64(i) / float64(g.cfg.Count)
		at = at.Add(-g.cfg.Spread + time.Duration(frac*float64(g.cfg.Spread)))
	}
	late := time.Duration(r.Float64() * float64(min(lateness, g.cfg.Spread)))
	return at.Add(-late).UTC().Truncate(time.Millisecond)
}

// Record is transaction i as it goes to Kafka, received at receivedAt.
func (g *Generator) Record(i int, receivedAt time.Time) (key string, value []byte, id event.UUID, err error) {
	e := g.Envelope(i)
	e.ReceivedAt = receivedAt.UTC()
	value, err = event.Encode(e)
	if err != nil {
		return "", nil, event.UUID{}, fmt.Errorf("encoding transaction %d: %w", i, err)
	}
	return Key(e), value, e.ID, nil
}

// rng is the random stream of one thing (a transaction, an account, a pool
// entry) in one domain.
func rng(seed, domain, n uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed^domain*0x9e3779b97f4a7c15, n))
}

// unit is a uniform draw in [0, 1) for one thing in one domain.
func unit(seed, domain, n uint64) float64 { return rng(seed, domain, n).Float64() }

// zipf draws an index in [0, n) with a heavy head: the top recipient of a
// workspace is paid a few percent of the time, the tail rarely.
func zipf(r *rand.Rand, n int) int {
	if n <= 1 {
		return 0
	}
	return int(rand.NewZipf(r, 1.1, 4, uint64(n-1)).Uint64())
}

func pick(r *rand.Rand, from []string) string { return from[r.IntN(len(from))] }

// amount is log-normal around a few tens of euros, with a long tail into the
// tens of thousands, as card and transfer amounts are.
func amount(r *rand.Rand) string {
	v := math.Exp(r.NormFloat64()*1.2 + 3.5)
	v = min(max(v, 0.01), 250000)
	return strconv.FormatFloat(v, 'f', 2, 64)
}

// workspaceID is a name-based UUID (version 8, RFC 9562's custom layout) of
// the seed and the workspace's index.
func workspaceID(seed uint64, w int) event.UUID {
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], seed)
	binary.BigEndian.PutUint64(b[8:], uint64(w))
	sum := sha256.Sum256(append([]byte("speculapro loadgen workspace:"), b[:]...))
	var u event.UUID
	copy(u[:], sum[:16])
	u[6] = 0x80 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return u
}

package loadgen

import (
	"bytes"
	"errors"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// testStart follows the clock: event.Decode refuses an occurred_at that no
// partition will ever hold, so a fixed date would fail these tests once it
// falls out of the partition window.
var testStart = time.Now().UTC().Truncate(time.Hour)

func testConfig() Config {
	return Config{
		Seed: 42, Count: 5000, Accounts: 2000, Workspaces: 3, Counterparties: 600,
		KnownAccountsRatio: 0.3, LinkedRatio: 0.05, Start: testStart, Spread: DefaultSpread,
	}
}

func testProtector(t testing.TB) *identity.Protector {
	t.Helper()
	p, err := identity.NewProtector(identity.DevKeys())
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func newTestGenerator(t testing.TB, cfg Config) *Generator {
	t.Helper()
	g, err := New(cfg, testProtector(t))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		tweak  func(*Config)
		errHas string
	}{
		{"valid", func(*Config) {}, ""},
		{"no transactions is fine", func(c *Config) { c.Count = 0 }, ""},
		{"negative count", func(c *Config) { c.Count = -1 }, "count"},
		{"no workspace", func(c *Config) { c.Workspaces = 0 }, "workspaces"},
		{"fewer than two accounts per workspace", func(c *Config) { c.Accounts = 5 }, "accounts"},
		{"fewer counterparties than workspaces", func(c *Config) { c.Counterparties = 2 }, "counterparties"},
		{"known ratio above 1", func(c *Config) { c.KnownAccountsRatio = 1.5 }, "known accounts ratio"},
		{"known ratio NaN", func(c *Config) { c.KnownAccountsRatio = math.NaN() }, "known accounts ratio"},
		{"linked ratio negative", func(c *Config) { c.LinkedRatio = -0.1 }, "linked"},
		{"spread beyond the partitions", func(c *Config) { c.Spread = 30 * 24 * time.Hour }, "spread"},
		{"no start", func(c *Config) { c.Start = time.Time{} }, "start"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := testConfig()
			tt.tweak(&c)
			err := c.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tt.errHas) {
				t.Fatalf("Validate = %v, want ErrInvalidConfig naming %q", err, tt.errHas)
			}
			if _, err := New(c, testProtector(t)); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New accepted an invalid config: %v", err)
			}
		})
	}
}

// The same Config must give the same transactions, so a test can recompute
// what was sent; only the ciphertexts may differ (random AES-GCM nonces),
// and they must still decrypt to the same identifier.
func TestSameSeedSameTransactions(t *testing.T) {
	cfg := testConfig()
	a, b := newTestGenerator(t, cfg), newTestGenerator(t, cfg)
	p := testProtector(t)
	for i := range cfg.Count {
		x, y := a.Envelope(i), b.Envelope(i)
		if (x.Counterparty == nil) != (y.Counterparty == nil) {
			t.Fatalf("transaction %d: counterparty present in one run only", i)
		}
		if x.Counterparty != nil {
			cx, cy := x.Counterparty.IdentifierEnc, y.Counterparty.IdentifierEnc
			if cx != "" {
				dx, err1 := p.Keys.Decrypt(x.WorkspaceID, identity.FieldCounterpartyIdentifier, cx)
				dy, err2 := p.Keys.Decrypt(y.WorkspaceID, identity.FieldCounterpartyIdentifier, cy)
				if err1 != nil || err2 != nil || dx != dy {
					t.Fatalf("transaction %d: ciphertexts do not decrypt to the same identifier (%v, %v)", i, err1, err2)
				}
			}
			x.Counterparty.IdentifierEnc, y.Counterparty.IdentifierEnc = "", ""
		}
		xb, err := event.Encode(x)
		if err != nil {
			t.Fatal(err)
		}
		yb, _ := event.Encode(y)
		if !bytes.Equal(xb, yb) {
			t.Fatalf("transaction %d differs between two generators of one config:\n%s\n%s", i, xb, yb)
		}
	}

	other := cfg
	other.Seed++
	c := newTestGenerator(t, other)
	same := 0
	for i := range 100 {
		if a.Envelope(i).ID == c.Envelope(i).ID {
			same++
		}
	}
	if same > 0 {
		t.Fatalf("%d of 100 IDs are shared by seeds %d and %d", same, cfg.Seed, other.Seed)
	}
	if a.Workspaces()[0] == c.Workspaces()[0] {
		t.Fatal("two seeds share a workspace ID")
	}
}

// Every record is a valid envelope with its fixed ID, under the key rule
// workspace_id:account_external_id, in the partition window.
func TestRecordsAreValidEnvelopesUnderTheKeyRule(t *testing.T) {
	cfg := testConfig()
	g := newTestGenerator(t, cfg)
	received := testStart.Add(time.Minute)
	ids := map[event.UUID]bool{}
	for i := range cfg.Count {
		key, value, id, err := g.Record(i, received)
		if err != nil {
			t.Fatalf("Record(%d): %v", i, err)
		}
		e, err := event.Decode(value)
		if err != nil {
			t.Fatalf("Record(%d) does not decode: %v", i, err)
		}
		if e.ID != id || e.ID != event.TransactionID(e.WorkspaceID, e.ExternalID, e.OccurredAt) {
			t.Fatalf("Record(%d): id %s is not TransactionID of the envelope", i, e.ID)
		}
		if ids[id] {
			t.Fatalf("Record(%d): id %s repeated", i, id)
		}
		ids[id] = true
		if want := e.WorkspaceID.String() + ":" + e.AccountExternalID; key != want {
			t.Fatalf("Record(%d): key %q, want %q", i, key, want)
		}
		if !e.ReceivedAt.Equal(received) {
			t.Fatalf("Record(%d): received_at %s, want %s", i, e.ReceivedAt, received)
		}
		lo := testStart.Add(-cfg.Spread - lateness)
		if e.OccurredAt.Before(lo) || e.OccurredAt.After(testStart) {
			t.Fatalf("Record(%d): occurred_at %s outside [%s, %s]", i, e.OccurredAt, lo, testStart)
		}
		if e.Kind != event.KindTransaction || e.CustomerExternalID == "" {
			t.Fatalf("Record(%d): kind %q customer %q", i, e.Kind, e.CustomerExternalID)
		}
	}
}

// No clear identifier may appear in a record: neither as generated (with
// spaces and dashes) nor normalised, nor its last digits run on.
func TestNoClearIdentifierInRecords(t *testing.T) {
	cfg := testConfig()
	g := newTestGenerator(t, cfg)
	var clear []string
	for _, a := range g.accounts {
		clear = append(clear, a.iban)
	}
	for _, pool := range g.pools {
		for _, pe := range pool {
			if pe.clear == "" {
				continue
			}
			clear = append(clear, pe.clear)
			norm, err := identity.Normalize(identity.Kind(pe.cp.IdentifierKind), pe.clear)
			if err != nil {
				t.Fatalf("pool identifier of kind %s does not normalise: %v", pe.cp.IdentifierKind, err)
			}
			clear = append(clear, norm)
			// A run of the middle digits would reveal more than the mask.
			if len(norm) > 12 {
				clear = append(clear, norm[4:12])
			}
		}
	}
	if len(clear) < 1000 {
		t.Fatalf("only %d clear identifiers to look for; the population is too small for this test", len(clear))
	}
	var all bytes.Buffer
	for i := range cfg.Count {
		key, value, _, err := g.Record(i, testStart)
		if err != nil {
			t.Fatal(err)
		}
		all.WriteString(key)
		all.Write(value)
		all.WriteByte('\n')
	}
	// Fingerprints and ciphertexts are long hex/base64 runs that could hold
	// a short digit run by chance; only identifiers of 8+ characters count.
	for _, c := range clear {
		if len(c) >= 8 && bytes.Contains(all.Bytes(), []byte(c)) {
			t.Fatalf("a clear identifier (kind of %d chars) appears in the records", len(c))
		}
	}
}

// Every generated identifier must be one the ingest API would accept.
func TestIdentifiersAreValid(t *testing.T) {
	g := newTestGenerator(t, testConfig())
	for _, a := range g.accounts {
		if _, err := identity.Normalize(identity.KindIBAN, a.iban); err != nil {
			t.Fatalf("account %s: %v", a.ExternalID, err)
		}
	}
	kinds := map[string]int{}
	for _, pool := range g.pools {
		for _, pe := range pool {
			kinds[pe.cp.IdentifierKind]++
			if pe.cp.Fingerprint == "" {
				t.Fatalf("pool entry without a de-duplication fingerprint")
			}
			if pe.clear != "" && identity.InferKind(pe.clear) != identity.Kind(pe.cp.IdentifierKind) {
				t.Fatalf("an identifier of kind %s would be inferred as %s", pe.cp.IdentifierKind, identity.InferKind(pe.clear))
			}
		}
	}
	for _, k := range []string{"", "iban", "account_number", "phone"} {
		if kinds[k] == 0 {
			t.Errorf("no counterparty of identifier kind %q in the pool: %v", k, kinds)
		}
	}
}

// The distribution looks like real traffic: many accounts used, a share of
// them known, counterparties repeated with a heavy head, some linked to a
// known account's own IBAN, in every workspace.
func TestDistribution(t *testing.T) {
	cfg := testConfig()
	cfg.Count = 20000
	g := newTestGenerator(t, cfg)

	accounts := map[string]int{}
	perWorkspace := map[event.UUID]int{}
	cps := map[CounterpartyKey]int{}
	var noCP, in, linked int
	var sum float64
	for i := range cfg.Count {
		e := g.Envelope(i)
		accounts[e.AccountExternalID]++
		perWorkspace[e.WorkspaceID]++
		if e.Direction == event.DirectionIn {
			in++
		}
		var amt float64
		for _, c := range strings.Split(e.Amount, ".")[0] {
			amt = amt*10 + float64(c-'0')
		}
		sum += amt
		if e.Counterparty == nil {
			noCP++
			continue
		}
		cps[CounterpartyKey{e.WorkspaceID, e.Counterparty.Fingerprint}]++
	}
	x := g.Expect(cfg.Count)
	for _, acct := range x.Counterparties {
		if acct != (event.UUID{}) {
			linked++
		}
	}
	var known int
	for _, a := range g.accounts {
		if a.Known {
			known++
		}
	}
	var top int
	for _, n := range cps {
		top = max(top, n)
	}
	checks := []struct {
		what   string
		got    float64
		lo, hi float64
	}{
		{"share of accounts used", float64(len(accounts)) / float64(cfg.Accounts), 0.95, 1},
		{"share of known accounts", float64(known) / float64(cfg.Accounts), 0.25, 0.35},
		{"share of incoming transactions", float64(in) / float64(cfg.Count), 0.18, 0.30},
		{"share without counterparty (cash)", float64(noCP) / float64(cfg.Count), 0.02, 0.06},
		{"transactions per counterparty", float64(cfg.Count-noCP) / float64(len(cps)), 20, 400},
		{"top counterparty's share of its workspace", float64(top) / float64(cfg.Count/cfg.Workspaces), 0.01, 0.2},
		{"linked counterparties", float64(linked), 3, float64(cfg.Counterparties) * 0.15},
		{"mean whole amount", sum / float64(cfg.Count), 20, 300},
	}
	for _, c := range checks {
		if c.got < c.lo || c.got > c.hi {
			t.Errorf("%s = %.3f, want %.3f..%.3f", c.what, c.got, c.lo, c.hi)
		}
	}
	if len(perWorkspace) != cfg.Workspaces {
		t.Errorf("transactions in %d workspaces, want %d", len(perWorkspace), cfg.Workspaces)
	}
	for ws, n := range perWorkspace {
		if share := float64(n) / float64(cfg.Count); math.Abs(share-1/float64(cfg.Workspaces)) > 0.05 {
			t.Errorf("workspace %s has %.3f of the transactions", ws, share)
		}
	}
}

// A linked counterparty's identifier fingerprint is its known account's
// number fingerprint, in the same workspace: that is what the persister
// links on.
func TestLinkedCounterpartiesMatchKnownAccounts(t *testing.T) {
	g := newTestGenerator(t, testConfig())
	n := 0
	for w, pool := range g.pools {
		for _, pe := range pool {
			if pe.linked < 0 {
				continue
			}
			n++
			a := g.accounts[pe.linked]
			if !a.Known || a.WorkspaceIndex != w {
				t.Fatalf("linked counterparty points at account %s (known %v, workspace %d) from workspace %d", a.ExternalID, a.Known, a.WorkspaceIndex, w)
			}
			if pe.cp.IdentifierFP != a.Number.FP || pe.cp.IdentifierKind != string(identity.KindIBAN) {
				t.Fatalf("linked counterparty's fingerprint is not account %s's number fingerprint", a.ExternalID)
			}
		}
	}
	if n == 0 {
		t.Fatal("no linked counterparty in the pool")
	}
}

func TestExpect(t *testing.T) {
	cfg := testConfig()
	g := newTestGenerator(t, cfg)
	x := g.Expect(1000)
	if len(x.Transactions) != 1000 {
		t.Fatalf("%d expected transactions, want 1000", len(x.Transactions))
	}
	for i := range 1000 {
		e := g.Envelope(i)
		if _, ok := x.Transactions[e.ID]; !ok {
			t.Fatalf("transaction %d missing from Expect", i)
		}
		if _, ok := x.Accounts[event.AccountID(e.WorkspaceID, e.AccountExternalID)]; !ok {
			t.Fatalf("account of transaction %d missing from Expect", i)
		}
	}
	known := 0
	for _, a := range g.accounts {
		if a.Known {
			known++
			if !x.Accounts[a.ID()] || !x.Customers[a.CustomerID()] {
				t.Fatalf("known account %s not expected as real", a.ExternalID)
			}
		}
	}
	real := 0
	for _, k := range x.Accounts {
		if k {
			real++
		}
	}
	if real != known {
		t.Fatalf("%d accounts expected real, %d are known", real, known)
	}
}

func TestManifestRoundTrip(t *testing.T) {
	cfg := testConfig()
	g := newTestGenerator(t, cfg)
	path := filepath.Join(t.TempDir(), "manifest.json")
	m := NewManifest(g, 0, cfg.Count, Summary{Topic: "sp.txn.ingested", Sent: 5000, Acked: 5000})
	if err := WriteManifest(path, m); err != nil {
		t.Fatal(err)
	}
	back, err := ReadManifest(path)
	if err != nil {
		t.Fatal(err)
	}
	if !back.Complete || len(back.WorkspaceIDs) != cfg.Workspaces {
		t.Fatalf("manifest %+v", back)
	}
	c, err := back.Config()
	if err != nil {
		t.Fatal(err)
	}
	if !c.Start.Equal(cfg.Start) {
		t.Fatalf("start %s, want %s", c.Start, cfg.Start)
	}
	c.Start = cfg.Start
	if c != cfg {
		t.Fatalf("config from manifest %+v, want %+v", c, cfg)
	}
	h := newTestGenerator(t, c)
	for _, i := range []int{0, 1, 4999} {
		if g.Envelope(i).ID != h.Envelope(i).ID {
			t.Fatalf("transaction %d recomputed from the manifest has another ID", i)
		}
	}
}

func TestIBANCheckDigits(t *testing.T) {
	// The textbook example IBAN (DE89 3704 0044 0532 0130 00).
	if got := iban("DE", "370400440532013000"); got != "DE89370400440532013000" {
		t.Fatalf("iban = %s", got)
	}
}

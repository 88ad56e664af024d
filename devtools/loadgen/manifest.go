package loadgen

import (
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Manifest records a run: the generator's Config, from which every
// transaction and account event (and so every ID sent) can be recomputed
// with New, Envelope and AccountEvent, the workspaces it used, and what
// Kafka acknowledged. It holds no key and no identifier.
type Manifest struct {
	Seed               uint64    `json:"seed"`
	Count              int       `json:"count"`
	Accounts           int       `json:"accounts"`
	Workspaces         int       `json:"workspaces"`
	Counterparties     int       `json:"counterparties"`
	KnownAccountsRatio float64   `json:"known_accounts_ratio"`
	LinkedRatio        float64   `json:"linked_ratio"`
	Start              time.Time `json:"start"`
	Spread             string    `json:"spread"`
	AccountEvents      int       `json:"account_events"`
	From               int       `json:"from"`
	To                 int       `json:"to"`

	Topic        string   `json:"topic"`
	WorkspaceIDs []string `json:"workspace_ids"`
	Sent         int64    `json:"sent"`
	Acked        int64    `json:"acked"`
	Failed       int64    `json:"failed"`
	// Complete is true when every selected transaction was acknowledged.
	Complete bool `json:"complete"`

	// The account events sent (WithEvents), when any were.
	Events *ManifestEvents `json:"events,omitempty"`
}

// ManifestEvents is the account-event half of a run: events From..To-1 of
// the generator went to Topic.
type ManifestEvents struct {
	From     int    `json:"from"`
	To       int    `json:"to"`
	Topic    string `json:"topic"`
	Sent     int64  `json:"sent"`
	Acked    int64  `json:"acked"`
	Failed   int64  `json:"failed"`
	Complete bool   `json:"complete"`
}

// WithEvents adds that account events from..to-1 were sent, as s says.
func (m Manifest) WithEvents(from, to int, s Summary) Manifest {
	m.Events = &ManifestEvents{
		From: from, To: to, Topic: s.Topic, Sent: s.Sent, Acked: s.Acked, Failed: s.Failed,
		Complete: s.Acked == int64(to-from),
	}
	return m
}

// NewManifest describes a run of g over transactions from..to-1.
func NewManifest(g *Generator, from, to int, s Summary) Manifest {
	c := g.cfg
	m := Manifest{
		Seed: c.Seed, Count: c.Count, Accounts: c.Accounts, Workspaces: c.Workspaces,
		Counterparties: c.Counterparties, KnownAccountsRatio: c.KnownAccountsRatio, LinkedRatio: c.LinkedRatio,
		Start: c.Start, Spread: c.Spread.String(), AccountEvents: c.AccountEvents, From: from, To: to,
		Topic: s.Topic, Sent: s.Sent, Acked: s.Acked, Failed: s.Failed,
		Complete: s.Acked == int64(to-from),
	}
	for _, w := range g.workspaces {
		m.WorkspaceIDs = append(m.WorkspaceIDs, w.String())
	}
	return m
}

// Config is the generator configuration the manifest was made with.
func (m Manifest) Config() (Config, error) {
	spread, err := time.ParseDuration(m.Spread)
	if err != nil {
		return Config{}, fmt.Errorf("%w: manifest spread %q: %w", ErrInvalidConfig, m.Spread, err)
	}
	c := Config{
		Seed: m.Seed, Count: m.Count, Accounts: m.Accounts, Workspaces: m.Workspaces,
		Counterparties: m.Counterparties, KnownAccountsRatio: m.KnownAccountsRatio, LinkedRatio: m.LinkedRatio,
		Start: m.Start, Spread: spread, AccountEvents: m.AccountEvents,
	}
	return c, c.Validate()
}

// WriteManifest writes m as indented JSON to path.
func WriteManifest(path string, m Manifest) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding manifest: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing manifest %s: %w", path, err)
	}
	return nil
}

// ReadManifest reads a manifest WriteManifest wrote.
func ReadManifest(path string) (Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Manifest{}, fmt.Errorf("reading manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return Manifest{}, fmt.Errorf("decoding manifest %s: %w", path, err)
	}
	return m, nil
}

package apikey

import (
	"fmt"
	"slices"
	"strings"
)

// Scope is one thing a key may be used for; a key holds a set of them
// (speculapro.api_keys.scopes), and each API refuses a key without its own.
type Scope uint8

// The scopes, each named in the database and on the command line as
// Scope.String says.
const (
	// ScopeIngest: the ingest API (send transactions, account events,
	// customers and accounts).
	ScopeIngest Scope = 1 << iota
	// ScopeDecide: the decision API.
	ScopeDecide
	// ScopeCases: the case API (read and change cases).
	ScopeCases
)

// allScopes lists the scopes in the order they are printed.
var allScopes = []Scope{ScopeIngest, ScopeDecide, ScopeCases}

// DefaultScopes are what a key gets when none are named: what every key
// could do before keys had scopes.
const DefaultScopes = "ingest,decide"

// String is the scope's name: ingest, decide or cases.
func (s Scope) String() string {
	switch s {
	case ScopeIngest:
		return "ingest"
	case ScopeDecide:
		return "decide"
	case ScopeCases:
		return "cases"
	}
	return fmt.Sprintf("scope(%d)", uint8(s))
}

// Scopes is a set of scopes.
type Scopes uint8

// Has reports whether the set holds s.
func (ss Scopes) Has(s Scope) bool { return ss&Scopes(s) != 0 }

// Names lists the set's scope names, in the order ingest, decide, cases.
func (ss Scopes) Names() []string {
	var out []string
	for _, s := range allScopes {
		if ss.Has(s) {
			out = append(out, s.String())
		}
	}
	return out
}

// ScopesOf reads scope names as the database stores them; a name it does
// not know is an error (the column's CHECK allows none).
func ScopesOf(names []string) (Scopes, error) {
	var ss Scopes
	for _, n := range names {
		i := slices.IndexFunc(allScopes, func(s Scope) bool { return s.String() == n })
		if i < 0 {
			return 0, fmt.Errorf("unknown API key scope %.20q (known: ingest, decide, cases)", n)
		}
		ss |= Scopes(allScopes[i])
	}
	return ss, nil
}

// ParseScopes reads a comma-separated list such as "ingest,decide"; it must
// name at least one scope.
func ParseScopes(list string) (Scopes, error) {
	var names []string
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("no API key scope named in %.40q (known: ingest, decide, cases)", list)
	}
	return ScopesOf(names)
}

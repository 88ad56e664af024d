package rules

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// loadTimeout bounds one probe and reload: a slow database then delays a
// reload, never the caller.
const loadTimeout = 30 * time.Second

// Loader keeps the rules in force for one evaluator (the stream's rule_eval,
// the decision API): every workspace's enabled rules that Keep selects,
// compiled as one program per workspace, and published atomically so an
// evaluation reads them without a lock. Refresh probes for changes
// (Fingerprint) and loads again only when something changed, compiling again
// only the workspaces whose rule versions changed.
type Loader struct {
	db   Querier
	opts LoaderOptions
	set  atomic.Pointer[Set]
}

// LoaderOptions say which rules a Loader keeps and whom it tells.
type LoaderOptions struct {
	// Keep selects the rules the evaluator runs; nil keeps every rule.
	Keep func(r *Rule) bool
	// Refused, if not nil, hears of a stored rule that does not compile
	// (rules apply refuses those, but the database may hold one written
	// otherwise or by another version): it is left out and the others of its
	// workspace still run. rule is nil when the rules compile alone but not
	// together, a bug of ours; the workspace then evaluates nothing rather
	// than stop its evaluator.
	Refused func(rule *Rule, err error)
	// Loaded, if not nil, hears of every rule set published.
	Loaded func(s *Set)
}

// Set is the rules in force: one compiled program per workspace. It is never
// modified once published.
type Set struct {
	fingerprint string
	workspaces  map[event.UUID]*workspaceProgram
	rules       int
}

// workspaceProgram is one workspace's compiled rules; signature says which
// rule versions it holds, so an unchanged workspace is not compiled again.
type workspaceProgram struct {
	signature string
	program   *Program
}

// Program is the compiled rules of ws, nil when it has none.
func (s *Set) Program(ws event.UUID) *Program {
	if wp := s.workspaces[ws]; wp != nil {
		return wp.program
	}
	return nil
}

// Workspaces is the number of workspaces with rules in force.
func (s *Set) Workspaces() int { return len(s.workspaces) }

// Rules is the number of rules in force.
func (s *Set) Rules() int { return s.rules }

// NewLoader returns a Loader reading through db; it does no I/O.
func NewLoader(db Querier, opts LoaderOptions) *Loader {
	return &Loader{db: db, opts: opts}
}

// Current is the rule set in force, nil until the first Refresh succeeded.
func (l *Loader) Current() *Set { return l.set.Load() }

// Refresh probes the rules for changes and, when they changed (or were never
// loaded), loads, compiles and publishes them. On failure the set in force
// stays.
func (l *Loader) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, loadTimeout)
	defer cancel()
	// The probe first: a change landing between the two reads then shows at
	// the next probe instead of being missed.
	old := l.set.Load()
	fp, err := Fingerprint(ctx, l.db)
	if err != nil {
		return fmt.Errorf("probing the rules for changes: %w", err)
	}
	if old != nil && fp == old.fingerprint {
		return nil
	}
	all, err := LoadEnabled(ctx, l.db)
	if err != nil {
		return fmt.Errorf("loading the rules: %w", err)
	}
	set := &Set{fingerprint: fp, workspaces: make(map[event.UUID]*workspaceProgram, len(all))}
	for ws, rs := range all {
		var keep []Rule
		for i := range rs {
			if l.opts.Keep == nil || l.opts.Keep(&rs[i]) {
				keep = append(keep, rs[i])
			}
		}
		if len(keep) == 0 {
			continue
		}
		sig := signature(keep)
		wp := (*workspaceProgram)(nil)
		if old != nil {
			if o := old.workspaces[ws]; o != nil && o.signature == sig {
				wp = o
			}
		}
		if wp == nil {
			wp = &workspaceProgram{signature: sig, program: l.compile(keep)}
		}
		set.workspaces[ws] = wp
		set.rules += wp.program.Len()
	}
	l.Publish(set)
	return nil
}

// Watch calls Refresh every interval until ctx ends, telling failed of each
// failure (never of one a shutdown caused).
func (l *Loader) Watch(ctx context.Context, interval time.Duration, failed func(error)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for ctx.Err() == nil {
		select {
		case <-t.C:
			if err := l.Refresh(ctx); err != nil && ctx.Err() == nil && failed != nil {
				failed(err)
			}
		case <-ctx.Done():
		}
	}
}

// compile compiles one workspace's rules as one program, leaving out those
// that do not compile.
func (l *Loader) compile(rs []Rule) *Program {
	prog, err := Compile(rs)
	if err == nil {
		return prog
	}
	var good []Rule
	for i := range rs {
		if _, err := Compile(rs[i : i+1]); err != nil {
			if l.opts.Refused != nil {
				// The error names the rule and the position in its expression.
				l.opts.Refused(&rs[i], err)
			}
			continue
		}
		good = append(good, rs[i])
	}
	if prog, err = Compile(good); err != nil {
		if l.opts.Refused != nil {
			l.opts.Refused(nil, fmt.Errorf("compiling %d rules together: %w", len(good), err))
		}
		prog, _ = Compile(nil)
	}
	return prog
}

// signature names the rule versions of one workspace (they arrive ordered
// by name).
func signature(rs []Rule) string {
	var b strings.Builder
	for _, r := range rs {
		fmt.Fprintf(&b, "%s:%d,", r.ID, r.Version)
	}
	return b.String()
}

// NewSet is a rule set of programs by workspace, put in force by hand with
// Publish where no database is read (a test, a backtest).
func NewSet(programs map[event.UUID]*Program) *Set {
	s := &Set{workspaces: make(map[event.UUID]*workspaceProgram, len(programs))}
	for ws, p := range programs {
		s.workspaces[ws] = &workspaceProgram{program: p}
		s.rules += p.Len()
	}
	return s
}

// Publish puts s in force as a load would.
func (l *Loader) Publish(s *Set) {
	l.set.Store(s)
	if l.opts.Loaded != nil {
		l.opts.Loaded(s)
	}
}

package api

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// Log lines of the decision's rules.
const (
	logDecisionRulesLoaded = "decision: rules loaded"
	logDecisionRulesFailed = "decision: loading the rules failed, keeping the loaded ones"
)

// realtimeRules holds the compiled real-time rules of every workspace: the
// enabled transaction rules whose action is review or decline (those that
// only alert are the stream's). They are loaded as rule_eval loads its
// rules (rules.LoadEnabled, probed with rules.Fingerprint every interval,
// each workspace compiled again only when its rule versions changed) and
// published atomically, so a decision reads them without a lock.
type realtimeRules struct {
	pool     *pgxpool.Pool
	interval time.Duration
	log      *service.Logger
	set      atomic.Pointer[realtimeSet]
	lastWarn time.Time
}

type realtimeSet struct {
	fingerprint string
	workspaces  map[event.UUID]*realtimeProgram
	rules       int
}

type realtimeProgram struct {
	signature string
	program   *rules.Program
}

// isRealtime says whether a rule takes part in the real-time decision.
func isRealtime(r *rules.Rule) bool {
	return r.Enabled && r.AppliesTo == event.KindTransaction && (r.Action == "review" || r.Action == "decline")
}

// program returns the workspace's compiled rules; ok is false until the
// rules were loaded once (a decision then falls back).
func (rr *realtimeRules) program(ws event.UUID) (p *rules.Program, ok bool) {
	s := rr.set.Load()
	if s == nil {
		return nil, false
	}
	if wp := s.workspaces[ws]; wp != nil {
		return wp.program, true
	}
	return nil, true
}

// run loads the rules, retrying until it succeeds, then probes for changes
// every interval until ctx ends.
func (rr *realtimeRules) run(ctx context.Context) {
	wait := 200 * time.Millisecond
	for {
		if err := rr.reload(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if time.Since(rr.lastWarn) >= time.Minute {
				rr.lastWarn = time.Now()
				applog.With(rr.log, "err", err.Error()).Warn(logDecisionRulesFailed)
			}
		} else if rr.set.Load() != nil {
			wait = rr.interval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		if rr.set.Load() == nil {
			wait = min(2*wait, 5*time.Second)
		}
	}
}

func (rr *realtimeRules) reload(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	old := rr.set.Load()
	fp, err := rules.Fingerprint(ctx, rr.pool)
	if err != nil {
		return fmt.Errorf("probing the rules for changes: %w", err)
	}
	if old != nil && fp == old.fingerprint {
		return nil
	}
	all, err := rules.LoadEnabled(ctx, rr.pool)
	if err != nil {
		return fmt.Errorf("loading the rules: %w", err)
	}
	set := &realtimeSet{fingerprint: fp, workspaces: map[event.UUID]*realtimeProgram{}}
	for ws, rs := range all {
		var keep []rules.Rule
		var sig strings.Builder
		for i := range rs {
			if isRealtime(&rs[i]) {
				keep = append(keep, rs[i])
				fmt.Fprintf(&sig, "%s:%d,", rs[i].ID, rs[i].Version)
			}
		}
		if len(keep) == 0 {
			continue
		}
		if old != nil {
			if wp := old.workspaces[ws]; wp != nil && wp.signature == sig.String() {
				set.workspaces[ws] = wp
				set.rules += len(keep)
				continue
			}
		}
		prog, err := rules.Compile(keep)
		if err != nil {
			// rules apply refuses rules that do not compile; keep the
			// others of the workspace rather than none.
			var good []rules.Rule
			for i := range keep {
				if _, e := rules.Compile(keep[i : i+1]); e == nil {
					good = append(good, keep[i])
				} else {
					applog.With(rr.log, "rule", keep[i].Name, "workspace", ws.String(), "err", e.Error()).Error("decision: rule does not compile, left out")
				}
			}
			if prog, err = rules.Compile(good); err != nil {
				return fmt.Errorf("compiling the rules of a workspace: %w", err)
			}
			keep = good
		}
		set.workspaces[ws] = &realtimeProgram{signature: sig.String(), program: prog}
		set.rules += len(keep)
	}
	rr.set.Store(set)
	applog.With(rr.log, "workspaces", len(set.workspaces), "rules", set.rules).Info(logDecisionRulesLoaded)
	return nil
}

package decisionapi

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/retry"
	"github.com/speculapro/speculapro/internal/rules"
)

// Log lines of the decision's rules.
const (
	logDecisionRulesLoaded  = "decision: rules loaded"
	logDecisionRulesFailed  = "decision: loading the rules failed, keeping the loaded ones"
	logDecisionRuleRefused  = "decision: rule does not compile, left out"
	decisionRulesWarnEvery  = time.Minute
	decisionRulesFirstRetry = 200 * time.Millisecond
	decisionRulesMaxRetry   = 5 * time.Second
)

// realtimeRules holds the compiled real-time rules of every workspace: the
// enabled transaction rules whose action is review or decline (those that
// only alert are the stream's), kept by the rules loader rule_eval uses.
type realtimeRules struct {
	loader   *rules.Loader
	interval time.Duration
	log      *service.Logger

	warnMu   sync.Mutex
	lastWarn time.Time
}

func newRealtimeRules(pool *pgxpool.Pool, interval time.Duration, log *service.Logger) *realtimeRules {
	rr := &realtimeRules{interval: interval, log: log}
	rr.loader = rules.NewLoader(pool, rules.LoaderOptions{
		Keep: isRealtime,
		Refused: func(r *rules.Rule, err error) {
			l := applog.With(log, "err", err.Error())
			if r != nil {
				l = applog.With(log, "rule", r.Name, "workspace", r.WorkspaceID.String(), "err", err.Error())
			}
			l.Error(logDecisionRuleRefused)
		},
		Loaded: func(s *rules.Set) {
			applog.With(log, "workspaces", s.Workspaces(), "rules", s.Rules()).Info(logDecisionRulesLoaded)
		},
	})
	return rr
}

// isRealtime says whether a rule takes part in the real-time decision.
func isRealtime(r *rules.Rule) bool {
	return r.Enabled && r.AppliesTo == event.KindTransaction && (r.Action == "review" || r.Action == "decline")
}

// program returns the workspace's compiled rules; ok is false until the
// rules were loaded once (a decision then falls back).
func (rr *realtimeRules) program(ws event.UUID) (p *rules.Program, ok bool) {
	s := rr.loader.Current()
	if s == nil {
		return nil, false
	}
	return s.Program(ws), true
}

// run loads the rules, retrying until it succeeds (decisions fall back
// meanwhile), then probes for changes every interval until ctx ends. A
// failure keeps the loaded rules and is logged at most once a minute.
func (rr *realtimeRules) run(ctx context.Context) {
	err := retry.Do(ctx, retry.Policy{
		Initial: decisionRulesFirstRetry, Max: decisionRulesMaxRetry,
		OnRetry: func(_ int, err error, _ time.Duration) { rr.failed(err) },
	}, func(ctx context.Context, _ int) error { return rr.loader.Refresh(ctx) })
	if err != nil {
		return // ctx ended
	}
	rr.loader.Watch(ctx, rr.interval, rr.failed)
}

// failed logs a failed load at most once a minute.
func (rr *realtimeRules) failed(err error) {
	rr.warnMu.Lock()
	defer rr.warnMu.Unlock()
	if time.Since(rr.lastWarn) < decisionRulesWarnEvery {
		return
	}
	rr.lastWarn = time.Now()
	applog.With(rr.log, "err", err.Error()).Warn(logDecisionRulesFailed)
}

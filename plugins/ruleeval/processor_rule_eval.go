package ruleeval

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/applog"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/eventmsg"
	"github.com/speculapro/speculapro/internal/pgsystem"
	"github.com/speculapro/speculapro/internal/retry"
	"github.com/speculapro/speculapro/internal/rules"
)

const (
	reFieldKind           = "kind"
	reFieldReloadInterval = "reload_interval"
	reFieldRealtimeOnly   = "realtime_only"
	reFieldKeepFeatures   = "keep_features"
)

// Metadata the step reads (set by feature_update) and writes (read by
// pg_rule_hits).
const (
	metaFeatures = "features"
	// metaReplayed (bool) marks an event the running totals had counted
	// already: its features are today's, not the ones it was evaluated with.
	metaReplayed = "features_replayed"
	metaRuleEval = "rule_eval"
)

// Metric names.
const (
	metricEventsEvaluated = "speculapro_stream_events_evaluated_total" // label kind
	metricRuleHits        = "speculapro_stream_rule_hits_total"        // labels rule, mode
	metricRuleEvaluations = "speculapro_stream_rule_evaluations_total" // labels rule, mode
	metricRuleErrors      = "speculapro_stream_rule_errors_total"      // label rule
	metricRulesLoaded     = "speculapro_stream_rules_loaded"           // label kind; gauge
	metricReplaysSkipped  = "speculapro_stream_replays_skipped_total"  // label kind
	// The role's stage timer, named and labelled as event_decode does it.
	metricStageDuration = "speculapro_stream_stage_duration_seconds" // labels table, stage
)

// Log lines.
const (
	logRuleFailed   = "stream: rule failed on an event"
	logRuleRefused  = "stream: rule does not compile, left out"
	logLoadRetry    = "stream: loading the rules failed, retrying"
	logReloadFailed = "stream: checking the rules for changes failed, keeping the loaded ones"
	logProgressFail = "stream: reading how far results are stored failed, evaluating replayed events again"
	logRulesLoaded  = "stream: rules loaded"
)

const (
	// ruleLogEvery bounds the WARN lines of one failing rule (and of a
	// failing reload): its errors are all counted, one is logged a minute.
	ruleLogEvery = time.Minute
	// progressTimeout bounds reading how far results are stored; a slow
	// database then evaluates replays again, never holds the stream.
	progressTimeout = 30 * time.Second
	loadBackoff     = 500 * time.Millisecond
	loadMaxWait     = 10 * time.Second
)

func ruleEvalSpec() *service.ConfigSpec {
	return service.NewConfigSpec().
		Beta().
		Categories("Utility").
		Summary("Evaluates each event against its workspace's enabled rules (Bloblang expressions over the event and its running totals) and records what fired, and the feature values each rule read, in the metadata `rule_eval`.").
		Description(`
Takes each message's event envelope (from `+"`event_decode`"+`) and its running totals (the metadata `+"`features`"+`, set by
`+"`feature_update`"+`), runs the workspace's enabled rules of the event's kind, compiled once per workspace (the common
shape natively, as Go over the event and its features with Bloblang's semantics; the rest as ONE Bloblang program), and
sets the metadata `+"`rule_eval`"+` to

`+"```json"+`
{"hits": [{"rule": "large_amount_to_new_counterparty", "rule_id": "…", "version": 3, "score": 40,
           "severity": "high", "action": "alert", "alert": true, "shadow": false,
           "reads": {"features.account.new_counterparty": true}}],
 "evaluated": …}
`+"```"+`

(`+"`hits`"+` empty when nothing fired), which `+"`pg_rule_hits`"+` stores. `+"`evaluated`"+` is the workspace's rules in force
(one shared value, not a copy per event), which `+"`pg_rule_hits`"+` counts events against per rule version. A shadow rule
(`+"`mode: shadow`"+`) is evaluated with the live ones, on the same features; its hits say `+"`shadow: true`"+` and
`+"`alert: false`"+`. `+"`reads`"+` holds every `+"`features.*`"+` path the
rule's expression names with the value it had: why the rule fired.

The rules are loaded from `+"`speculapro.rules`"+` by the first batch (so the constructor does no I/O; the batch waits,
retrying, until PostgreSQL answers) and then checked every `+"`reload_interval`"+` with a cheap probe; only on a change
are they loaded again, and only the workspaces whose rules changed are compiled again. A probe that fails keeps
the loaded rules and is logged at most once a minute.

An event read again inside the replay window (a group reset or renamed: `+"`feature_update`"+` marks it
`+"`features_replayed`"+`, its totals unchanged but read as they are now, later events included) whose results
`+"`pg_rule_hits`"+` has stored already (`+"`stream_progress`"+` reaches its offset) is not evaluated again: it gets no hits
(`+"`rule_eval.replayed`"+` is true) and is counted in `+"`speculapro_stream_replays_skipped_total`"+`. A replayed event
beyond the stored progress (its batch was in flight when a process died) is evaluated again, against the totals as
they are.

A rule that fails on an event (a missing field compared with a number, a type error, a result that is not a
bool) is counted in `+"`speculapro_stream_rule_errors_total{rule}`"+`, logged as
`+"`level=WARN msg=\"stream: rule failed on an event\"`"+` at most once a minute per rule, and never stops the other
rules or fails the message. A stored rule that does not compile (`+"`rules apply`"+` refuses those) is left out, counted
and logged the same way. Messages already flagged with an error pass through untouched; a message whose content
is not an envelope of `+"`kind`"+` is flagged.

### Metrics

`+"`speculapro_stream_events_evaluated_total{kind}`, `speculapro_stream_rule_hits_total{rule,mode}`, `speculapro_stream_rule_evaluations_total{rule,mode}` (events evaluated against each rule), `speculapro_stream_rule_errors_total{rule}`, `speculapro_stream_replays_skipped_total{kind}`, `speculapro_stream_rules_loaded{kind}`"+` (a gauge), and
`+"`speculapro_stream_stage_duration_seconds{stage=\"evaluate\"}`"+`.`).
		Fields(pgsystem.URLFields()...).
		Fields(
			service.NewStringEnumField(reFieldKind, string(event.KindTransaction), string(event.KindAccountEvent)).
				Description("The kind of event the messages carry; only rules that apply to it can fire.").
				Default(string(event.KindTransaction)),
			service.NewDurationField(reFieldReloadInterval).
				Description("How often the rules are checked for changes (a cheap probe; they are loaded and compiled again only when something changed).").
				Default("5s"),
			service.NewBoolField(reFieldRealtimeOnly).
				Description("Evaluate only the rules whose action is `review` or `decline` (the real-time decision's), not those that only `alert`.").
				Default(false).
				Advanced(),
			service.NewBoolField(reFieldKeepFeatures).
				Description("Keep the metadata `features` on each message after evaluation. Off by default: the running totals are the largest thing a message carries (about 80 values), and the output only needs `rule_eval`, whose `reads` already holds every value a rule that fired read; dropping them here keeps the batches waiting for the output small.").
				Default(false).
				Advanced(),
		).
		Example("The stream evaluator", "", `
pipeline:
  processors:
    - event_decode:
        kind: transaction
        role: stream
    - feature_update:
        url: ${SP_REDIS_URL:redis://127.0.0.1:6379/0}
    - rule_eval: {}
`)
}

func init() {
	service.MustRegisterBatchProcessor("rule_eval", ruleEvalSpec(),
		func(conf *service.ParsedConfig, mgr *service.Resources) (service.BatchProcessor, error) {
			return newRuleEvalFromConfig(conf, mgr)
		})
}

// counter, gauge and timer are what the step uses of the engine's metrics;
// tests read their own.
type counter interface {
	Incr(count int64, labelValues ...string)
}

type gauge interface {
	Set(value int64, labelValues ...string)
}

type timer interface {
	Timing(delta int64, labelValues ...string)
}

type ruleEvalMetrics struct {
	evaluated counter
	skipped   counter // replays of events whose results are stored
	hits      counter // labels rule, mode
	// ruleEvaluations counts events per rule they were evaluated against
	// (a hit rate's denominator); labels rule, mode.
	ruleEvaluations counter
	errors          counter
	loaded          gauge
	stage           timer
}

// ruleEval is the rule_eval processor.
type ruleEval struct {
	url            string
	kind           event.Kind
	table          string // the stage timer's label
	reloadInterval time.Duration
	realtimeOnly   bool
	keepFeatures   bool
	log            *service.Logger
	m              ruleEvalMetrics

	// connect, once: the pool and the first load, run by the first batch.
	connectMu sync.Mutex
	pool      *pgxpool.Pool
	loader    atomic.Pointer[rules.Loader] // set once the rules were loaded
	stop      context.CancelFunc           // ends the reloader
	reloader  sync.WaitGroup

	logMu     sync.Mutex
	lastWarns map[string]time.Time // per rule id (or "reload"): when a WARN was last logged
}

func newRuleEvalFromConfig(conf *service.ParsedConfig, mgr *service.Resources) (*ruleEval, error) {
	url, err := pgsystem.URLFromParsed(conf)
	if err != nil {
		return nil, err
	}
	kind, err := conf.FieldString(reFieldKind)
	if err != nil {
		return nil, err
	}
	interval, err := conf.FieldDuration(reFieldReloadInterval)
	if err != nil {
		return nil, err
	}
	realtime, err := conf.FieldBool(reFieldRealtimeOnly)
	if err != nil {
		return nil, err
	}
	keep, err := conf.FieldBool(reFieldKeepFeatures)
	if err != nil {
		return nil, err
	}
	r, err := newRuleEval(url, event.Kind(kind), interval, realtime, mgr)
	if err != nil {
		return nil, err
	}
	r.keepFeatures = keep
	return r, nil
}

// newRuleEval builds the step; it does no I/O (the first batch connects).
func newRuleEval(url string, kind event.Kind, reloadInterval time.Duration, realtimeOnly bool, mgr *service.Resources) (*ruleEval, error) {
	if kind != event.KindTransaction && kind != event.KindAccountEvent {
		return nil, fmt.Errorf("rule_eval: %s must be %s or %s, got %q", reFieldKind, event.KindTransaction, event.KindAccountEvent, kind)
	}
	if reloadInterval <= 0 {
		return nil, fmt.Errorf("rule_eval: %s must be positive, got %s", reFieldReloadInterval, reloadInterval)
	}
	if _, err := pgxpool.ParseConfig(url); err != nil {
		// pgx's parse errors can quote the URL, password included.
		return nil, errors.New("rule_eval: the PostgreSQL URL cannot be parsed")
	}
	m := mgr.Metrics()
	return &ruleEval{
		url: url, kind: kind, reloadInterval: reloadInterval, realtimeOnly: realtimeOnly,
		table: kind.Table(),
		log:   mgr.Logger(),
		m: ruleEvalMetrics{
			evaluated:       m.NewCounter(metricEventsEvaluated, "kind"),
			skipped:         m.NewCounter(metricReplaysSkipped, "kind"),
			hits:            m.NewCounter(metricRuleHits, "rule", "mode"),
			ruleEvaluations: m.NewCounter(metricRuleEvaluations, "rule", "mode"),
			errors:          m.NewCounter(metricRuleErrors, "rule"),
			loaded:          m.NewGauge(metricRulesLoaded, "kind"),
			stage:           m.NewTimer(metricStageDuration, "table", "stage"),
		},
		lastWarns: map[string]time.Time{},
	}, nil
}

// ProcessBatch evaluates every readable message and records its hits. It
// returns an error only when ctx ends before the rules could be loaded
// (shutdown): the engine then acks nothing of the batch.
func (r *ruleEval) ProcessBatch(ctx context.Context, batch service.MessageBatch) ([]service.MessageBatch, error) {
	set, err := r.inForce(ctx)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	stored := r.storedReplays(ctx, batch)
	evaluated, skipped := 0, 0
	var sc rules.Scratch // this call's: pipeline threads run batches at once
	counted := batchCounts{by: map[*rules.Evaluated]*evaluatedCount{}}
	for i, msg := range batch {
		if msg.GetError() != nil {
			continue
		}
		env, err := eventmsg.Of(msg, r.kind)
		if err != nil {
			msg.SetError(err)
			continue
		}
		if stored[i] {
			// Evaluated and stored before, with the totals it had then;
			// evaluating it against today's would find what never was.
			skipped++
			batch[i].MetaSetMut(metaRuleEval, map[string]any{"hits": []any{}, "replayed": true})
			continue
		}
		batch[i].MetaSetMut(metaRuleEval, r.evaluate(msg, env, set.Program(env.WorkspaceID), &sc, &counted))
		evaluated++
		if !r.keepFeatures {
			batch[i].MetaDelete(metaFeatures)
		} else if v, ok := batch[i].MetaGetMut(metaFeatures); ok {
			if vals, ok := v.(rules.Features); ok {
				// Kept for what follows: the map a mapping can read.
				batch[i].MetaSetMut(metaFeatures, vals.Map())
			}
		}
	}
	r.m.evaluated.Incr(int64(evaluated), string(r.kind))
	for ev, c := range counted.by {
		for _, rule := range ev.Rules {
			r.m.ruleEvaluations.Incr(c.events, rule.Name, rule.ModeOrLive())
		}
	}
	if skipped > 0 {
		r.m.skipped.Incr(int64(skipped), string(r.kind))
	}
	r.m.stage.Timing(time.Since(start).Nanoseconds(), r.table, "evaluate")
	return []service.MessageBatch{batch}, nil
}

// noHits is the metadata of every event nothing fired on, shared: nearly
// every event is one, and a map of its own each would be about 3 % of the
// bytes the stream allocates. Nothing writes to it (pg_rule_hits only reads, a
// mapping that changes @rule_eval replaces the value).
var noHits = map[string]any{"hits": []any{}}

// storedReplays says which messages of the batch are replays (the running
// totals had counted them) whose results pg_rule_hits has stored already
// (stream_progress reaches their offset). Only replays cost a query, and a
// failed query evaluates them again (at worst a hit against today's totals)
// rather than hold the stream.
func (r *ruleEval) storedReplays(ctx context.Context, batch service.MessageBatch) map[int]bool {
	type tp struct {
		topic     string
		partition int32
	}
	offsets := map[int]int64{}
	parts := map[int]tp{}
	want := map[tp]bool{}
	for i, msg := range batch {
		if v, ok := msg.MetaGetMut(metaReplayed); !ok || v != true || msg.GetError() != nil {
			continue
		}
		topic, _ := msg.MetaGet("kafka_topic")
		ps, _ := msg.MetaGet("kafka_partition")
		offText, _ := msg.MetaGet("kafka_offset")
		part, err1 := strconv.ParseInt(ps, 10, 32)
		off, err2 := strconv.ParseInt(offText, 10, 64)
		if topic == "" || err1 != nil || err2 != nil {
			continue
		}
		k := tp{topic, int32(part)}
		offsets[i], parts[i], want[k] = off, k, true
	}
	if len(offsets) == 0 {
		return nil
	}
	var topics []string
	var partitions []int32
	for k := range want {
		topics, partitions = append(topics, k.topic), append(partitions, k.partition)
	}
	qctx, cancel := context.WithTimeout(ctx, progressTimeout)
	defer cancel()
	rows, err := r.pool.Query(qctx, `SELECT topic, kafka_partition, stored_offset FROM speculapro.stream_progress
 WHERE (topic, kafka_partition) IN (SELECT * FROM unnest($1::text[], $2::int[]))`, topics, partitions)
	high := map[tp]int64{}
	if err == nil {
		var k tp
		var off int64
		_, err = pgx.ForEachRow(rows, []any{&k.topic, &k.partition, &off}, func() error { high[k] = off; return nil })
	}
	if err != nil {
		if ctx.Err() == nil && r.warnDue("progress") {
			applog.With(r.log, "err", err.Error()).Warn(logProgressFail)
		}
		return nil
	}
	stored := make(map[int]bool, len(offsets))
	for i, off := range offsets {
		if h, ok := high[parts[i]]; ok && off <= h {
			stored[i] = true
		}
	}
	return stored
}

// inForce returns the rules in force, connecting and loading them first if
// this is the first batch.
func (r *ruleEval) inForce(ctx context.Context) (*rules.Set, error) {
	if l := r.loader.Load(); l != nil {
		return l.Current(), nil
	}
	r.connectMu.Lock()
	defer r.connectMu.Unlock()
	if l := r.loader.Load(); l != nil {
		return l.Current(), nil // another pipeline thread loaded them meanwhile
	}
	if r.pool == nil {
		pool, err := r.newPool()
		if err != nil {
			return nil, err
		}
		r.pool = pool
	}
	loader := rules.NewLoader(r.pool, rules.LoaderOptions{Keep: r.keeps, Refused: r.refused, Loaded: r.loaded})
	// Without its rules the stream cannot say what fired: wait for
	// PostgreSQL rather than let events pass unevaluated.
	err := retry.Do(ctx, retry.Policy{
		Initial: loadBackoff, Max: loadMaxWait, Jitter: 0.2,
		OnRetry: func(_ int, err error, backoff time.Duration) {
			applog.With(r.log, "err", err.Error(), "backoff", backoff.Round(time.Millisecond).String()).Error(logLoadRetry)
		},
	}, func(ctx context.Context, _ int) error { return loader.Refresh(ctx) })
	if err != nil {
		return nil, err
	}
	r.loader.Store(loader)
	rctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	r.reloader.Add(1)
	// The reloader owns the probes and reloads; Close cancels rctx and waits
	// for it, so it cannot outlive the step. A failed probe keeps the loaded
	// rules.
	go func() {
		defer r.reloader.Done()
		loader.Watch(rctx, r.reloadInterval, func(err error) {
			if r.warnDue("reload") {
				applog.With(r.log, "err", err.Error()).Warn(logReloadFailed)
			}
		})
	}()
	return loader.Current(), nil
}

// newPool is the step's pool: the probe and a reload, never more than one at
// a time.
func (r *ruleEval) newPool() (*pgxpool.Pool, error) {
	pcfg, err := pgxpool.ParseConfig(r.url)
	if err != nil {
		return nil, errors.New("rule_eval: the PostgreSQL URL cannot be parsed")
	}
	pcfg.MaxConns = 2
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > 10*time.Second {
		pcfg.ConnConfig.ConnectTimeout = 10 * time.Second
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("rule_eval: creating the connection pool: %w", err)
	}
	return pool, nil
}

// keeps selects the rules of the step's kind (and only the real-time
// decision's, with realtime_only).
func (r *ruleEval) keeps(rule *rules.Rule) bool {
	return rule.AppliesTo == r.kind && (!r.realtimeOnly || rule.Action == "review" || rule.Action == "decline")
}

// refused counts and logs a stored rule that does not compile (left out,
// the others still run).
func (r *ruleEval) refused(rule *rules.Rule, err error) {
	if rule == nil {
		applog.With(r.log, "err", err.Error()).Error(logRuleRefused)
		return
	}
	r.m.errors.Incr(1, rule.Name)
	if r.warnDue(rule.ID.String()) {
		applog.With(r.log, "rule", rule.Name, "rule_id", rule.ID.String(), "workspace", rule.WorkspaceID.String(), "err", err.Error()).Error(logRuleRefused)
	}
}

// loaded reports the rules now in force.
func (r *ruleEval) loaded(set *rules.Set) {
	r.m.loaded.Set(int64(set.Rules()), string(r.kind))
	applog.With(r.log, "kind", string(r.kind), "workspaces", set.Workspaces(), "rules", set.Rules()).Info(logRulesLoaded)
}

// ruleFailed counts a rule's failure on one event and logs it at most once
// a minute per rule.
func (r *ruleEval) ruleFailed(rule *rules.Rule, err error) {
	r.m.errors.Incr(1, rule.Name)
	if r.warnDue(rule.ID.String()) {
		applog.With(r.log, "rule", rule.Name, "rule_id", rule.ID.String(), "workspace", rule.WorkspaceID.String(), "err", err.Error()).Warn(logRuleFailed)
	}
}

// warnDue reports whether key's WARN may be logged now, and if so notes it.
func (r *ruleEval) warnDue(key string) bool {
	r.logMu.Lock()
	defer r.logMu.Unlock()
	now := time.Now()
	if last, ok := r.lastWarns[key]; ok && now.Sub(last) < ruleLogEvery {
		return false
	}
	r.lastWarns[key] = now
	return true
}

// Close stops the reloader and closes the pool.
func (r *ruleEval) Close(context.Context) error {
	r.connectMu.Lock()
	defer r.connectMu.Unlock()
	if r.stop != nil {
		r.stop()
		r.reloader.Wait()
	}
	if r.pool != nil {
		r.pool.Close()
	}
	return nil
}

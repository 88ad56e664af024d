package decisionapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/rules"
)

// Why a decision was degraded (the label of speculapro_decision_degraded_total).
const (
	degradedTimeout = "timeout"           // the rules or Redis did not finish in time
	degradedRedis   = "redis"             // the running totals could not be read or written
	degradedRules   = "rules_unavailable" // the rules are not loaded yet (PostgreSQL down since start)
)

// decisionRoutes are the decision API's endpoints;
// TestDecisionOpenAPIDocumentsEveryRoute compares them with its document.
func (a *decisionAPI) decisionRoutes() []apirequest.Route {
	return []apirequest.Route{
		{Method: http.MethodPost, Pattern: "/v1/decisions", Authed: true, Handle: a.handleDecision},
		{Method: http.MethodGet, Pattern: "/v1/decisions/openapi.json", Authed: false, Handle: handleDecisionOpenAPI},
		{Method: http.MethodGet, Pattern: "/healthz", Authed: false, Handle: apirequest.HandleHealth},
		{Method: http.MethodGet, Pattern: "/readyz", Authed: false, Handle: a.handleDecisionReady},
	}
}

// decisionRule is one rule that fired, as answered.
type decisionRule struct {
	Rule    string  `json:"rule"`
	RuleID  string  `json:"rule_id"`
	Version int     `json:"version"`
	Action  string  `json:"action"`
	Score   float64 `json:"score"`
}

// decisionResponse is the answer to POST /v1/decisions.
type decisionResponse struct {
	ID         string         `json:"id"`
	ExternalID string         `json:"external_id"`
	Decision   event.Outcome  `json:"decision"`
	Score      float64        `json:"score"`
	Rules      []decisionRule `json:"rules"`
	Degraded   bool           `json:"degraded"`
	Reason     string         `json:"degraded_reason,omitempty"`
	Repeated   bool           `json:"repeated"`
	DecidedAt  time.Time      `json:"decided_at"`
	TookMS     float64        `json:"took_ms"`
}

// rejectedDecision answers a transaction that fails validation.
type rejectedDecision struct {
	Error  string                  `json:"error"`
	Errors []apirequest.FieldError `json:"errors"`
}

// decided is what the evaluation produced.
type decided struct {
	resp   decisionResponse
	reason string // degraded reason, "" when not degraded
}

func (a *decisionAPI) handleDecision(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
	a.handlers.Add(1)
	defer a.handlers.Done()
	arrived, _ := r.Context().Value(apirequest.ArrivalKey{}).(time.Time)
	// The answer must be written by arrival + timeout: the fallback is
	// chosen a little earlier, leaving room to encode and send it.
	deadline := arrived.Add(a.timeout - min(a.timeout/10, 20*time.Millisecond))

	body, code, err := a.ReadBody(w, r)
	if err != nil {
		return apirequest.WriteError(w, code, err)
	}
	env, _, ferrs, err := a.parseTransaction(body, ws, arrived.UTC()) // the counterparty protected on env
	switch {
	case err != nil:
		return apirequest.WriteError(w, http.StatusBadRequest, err)
	case len(ferrs) > 0:
		return apirequest.WriteJSON(w, http.StatusBadRequest, rejectedDecision{Error: "validation failed", Errors: ferrs})
	}

	d, deliver := a.decideInTime(env, arrived, deadline)
	wsText := ws.String()
	if deliver {
		env.Decision = &event.Decision{
			Outcome: d.resp.Decision, Score: d.resp.Score, DecidedAt: d.resp.DecidedAt,
			LatencyMS: int(d.resp.TookMS + 0.5), Degraded: d.resp.Degraded,
		}
		for _, h := range d.resp.Rules {
			env.Decision.Reasons = append(env.Decision.Reasons, h.Rule)
			if id, err := event.ParseUUID(h.RuleID); err == nil {
				env.Decision.RuleIDs = append(env.Decision.RuleIDs, id)
			}
		}
		if d.reason != "" {
			env.Decision.Reasons = append(env.Decision.Reasons, "degraded: "+d.reason)
		}
		b, err := event.Encode(*env)
		if err != nil {
			// Validation is stricter than Encode, so this is a bug; the
			// error names the field, never a value.
			a.Log.Errorf("decision_api: encoding a decided transaction: %v", err)
		} else {
			m := service.NewMessage(b)
			m.MetaSetMut("ingest_key", wsText+":"+env.AccountExternalID)
			m.MetaSetMut("ingest_topic", "txn.ingested")
			// Queued before the answer is written: an answered decision is
			// in the pipeline's hands (or this process's queue) by then.
			a.out <- m
		}
	}
	if d.reason != "" {
		a.degraded.Incr(1, wsText, d.reason)
	}
	a.outcomes.Incr(1, wsText, string(d.resp.Decision))
	d.resp.TookMS = float64(time.Since(arrived).Microseconds()) / 1000
	a.latency.Timing(time.Since(arrived).Nanoseconds(), string(d.resp.Decision))
	return writeDecision(w, &d.resp)
}

// decideInTime decides env, or answers the fallback when that cannot
// finish by deadline. deliver is false for a repeat (the first decision
// was delivered already). The decision runs on the request's own
// goroutine: every wait in it (its turn in a Redis batch, the batch's
// answer) ends with the deadline's context, and what is left after the
// last one (the rules, the answer's encoding) takes microseconds, so a
// goroutine, a channel and a timer per request would buy nothing.
func (a *decisionAPI) decideInTime(env *event.Envelope, arrived, deadline time.Time) (decided, bool) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	return a.decide(ctx, env, arrived)
}

func (a *decisionAPI) fallbackFor(env *event.Envelope, reason string) decided {
	return decided{reason: reason, resp: decisionResponse{
		ID: env.ID.String(), ExternalID: env.ExternalID, Decision: a.fallback, Rules: []decisionRule{},
		Degraded: true, Reason: reason, DecidedAt: time.Now().UTC(),
	}}
}

// rememberKey is the Redis key of a decision remembered for its
// external_id (hashed: keys carry no client text):
// <prefix>decision:<workspace>:<first 16 bytes of sha256(workspace, external_id), hex>.
func (a *decisionAPI) rememberKey(env *event.Envelope) string {
	var in [160]byte // on the stack for an external_id of up to 144 bytes
	sum := sha256.Sum256(append(append(in[:0], env.WorkspaceID[:]...), env.ExternalID...))
	var hx [32]byte
	hex.Encode(hx[:], sum[:16])
	var k strings.Builder
	k.Grow(len(a.fopts.KeyPrefix) + len("decision:") + 36 + 1 + len(hx))
	k.WriteString(a.fopts.KeyPrefix)
	k.WriteString("decision:")
	k.WriteString(env.WorkspaceID.String())
	k.WriteByte(':')
	k.Write(hx[:])
	return k.String()
}

// redisDegraded is the answer after a Redis call failed: degraded
// "redis" when it was Redis' fault (the breaker opens), "timeout" when the
// decision's own deadline ran out.
func (a *decisionAPI) redisDegraded(env *event.Envelope, err error) decided {
	if a.breaker.failed(err) {
		return a.fallbackFor(env, degradedRedis)
	}
	return a.fallbackFor(env, degradedTimeout)
}

// decide looks the external_id up, applies the transaction to the running
// totals and evaluates the workspace's real-time rules. Its Redis calls go
// in batches with the other decisions arriving meanwhile (decision_batch.go).
func (a *decisionAPI) decide(ctx context.Context, env *event.Envelope, arrived time.Time) (decided, bool) {
	prog, loaded := a.rules.program(env.WorkspaceID)
	if !loaded {
		return a.fallbackFor(env, degradedRules), true
	}
	if a.breaker.paused() {
		return a.fallbackFor(env, degradedRedis), true
	}
	key := a.rememberKey(env)
	res, err := a.applyBatched(ctx, env, key)
	if err != nil {
		return a.redisDegraded(env, err), true
	}
	if res.prev != nil {
		res.prev.Repeated = true
		return decided{resp: *res.prev}, false
	}
	resp := decisionResponse{ID: env.ID.String(), ExternalID: env.ExternalID, Decision: event.OutcomeApprove, Rules: []decisionRule{}}
	if prog != nil {
		sc := ruleScratch.Get().(*rules.Scratch)
		var f rules.Features = rules.MapFeatures(nil)
		if res.features != nil {
			f = res.features
		}
		hits, _ := prog.EvaluateFeatures(env, f, sc)
		resp.Decision, resp.Score, resp.Rules = outcomeOf(hits)
		ruleScratch.Put(sc)
	}
	resp.DecidedAt = time.Now().UTC()
	resp.TookMS = float64(time.Since(arrived).Microseconds()) / 1000
	b := appendDecision(make([]byte, 0, 256+96*len(resp.Rules)), &resp)
	// The first answer for the external_id stands: a concurrent twin that
	// lost the race answers the winner's decision and delivers nothing.
	if prev := a.rememberBatched(ctx, key, b); prev != nil {
		prev.Repeated = true
		return decided{resp: *prev}, false
	}
	return decided{resp: resp}, true
}

// ruleScratch holds what the rules are evaluated in, one per evaluation
// at a time (rules.Scratch), reused across requests.
var ruleScratch = sync.Pool{New: func() any { return new(rules.Scratch) }}

// outcomeOf: decline if a decline rule fired, else review if a review rule
// fired, else approve; the score is the sum of the fired rules' scores. A
// shadow rule's hit counts for none of it and is not answered: the stream
// stores it when it evaluates the decided transaction.
func outcomeOf(hits []rules.Hit) (event.Outcome, float64, []decisionRule) {
	out := event.OutcomeApprove
	var score float64
	fired := make([]decisionRule, 0, len(hits))
	for _, h := range hits {
		if h.Rule.Shadow() {
			continue
		}
		s, _ := strconv.ParseFloat(h.Rule.Score, 64)
		score += s
		fired = append(fired, decisionRule{Rule: h.Rule.Name, RuleID: h.Rule.ID.String(), Version: h.Rule.Version, Action: h.Rule.Action, Score: s})
		switch h.Rule.Action {
		case "decline":
			out = event.OutcomeDecline
		case "review":
			if out == event.OutcomeApprove {
				out = event.OutcomeReview
			}
		}
	}
	sort.Slice(fired, func(i, j int) bool { return fired[i].Rule < fired[j].Rule })
	if len(fired) > event.MaxDecisionReasons {
		fired = fired[:event.MaxDecisionReasons]
	}
	return out, score, fired
}

// parseTransaction reads one transaction as the ingest API reads an item
// (request_wire.go's one check of the body, then the same field reader:
// the same fields, limits and messages), with paths from the body's root.
// Every fault of the transaction, an unknown field or a key named twice
// included, is a field error; err only when the body is not one JSON
// object.
func (a *decisionAPI) parseTransaction(body []byte, ws event.UUID, now time.Time) (*event.Envelope, *apirequest.WireCounterparty, []apirequest.FieldError, error) {
	fault, err := apirequest.CheckBody(body, apirequest.FramingObject)
	if err != nil {
		return nil, nil, nil, err
	}
	fr, err := apirequest.NewFieldReader(body, "")
	if err != nil {
		return nil, nil, nil, fmt.Errorf("%w: want one transaction as a JSON object", apirequest.ErrMalformed)
	}
	fr.Checked = fault == nil
	fr.NoRecord = true // encoded once decided, with its decision
	// The field reader protects the counterparty as it parses it (the
	// ingest API's own path), so nothing is read back or protected twice.
	p := fr.Transaction(ws, now, a.protector)
	errs := fr.WithUnknown(p.Errors)
	if fault != nil {
		errs = []apirequest.FieldError{apirequest.FaultField("", fault)} // alone: request_wire.go
	}
	if len(errs) > 0 {
		return nil, nil, errs, nil
	}
	env := p.Item.Envelope
	return &env, p.Item.Counterparty, nil, nil
}

// handleDecisionReady: ready while PostgreSQL (keys, rules) answers and the
// rules are loaded. Redis and Kafka are not required: without them
// decisions are degraded or spooled, still answered.
func (a *decisionAPI) handleDecisionReady(w http.ResponseWriter, r *http.Request, _ event.UUID) int {
	ctx, cancel := context.WithTimeout(r.Context(), apirequest.ProbeTimeout)
	defer cancel()
	status := map[string]string{"status": "ready", "postgres": "ok", "redis": "ok", "rules": "loaded"}
	code := http.StatusOK
	if err := a.Pool.Ping(ctx); err != nil {
		status["postgres"], status["status"], code = "unreachable", "not ready", http.StatusServiceUnavailable
	}
	if _, ok := a.rules.program(event.UUID{}); !ok {
		status["rules"], status["status"], code = "not loaded", "not ready", http.StatusServiceUnavailable
	}
	if err := a.redis.Ping(ctx).Err(); err != nil {
		status["redis"] = "unreachable (decisions degraded)"
	}
	return apirequest.WriteJSON(w, code, status)
}

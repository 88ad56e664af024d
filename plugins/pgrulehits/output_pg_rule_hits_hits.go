package pgrulehits

import (
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redpanda-data/benthos/v4/public/service"

	"github.com/speculapro/speculapro/internal/event"
)

// hitRow is one rule_hits row to write.
type hitRow struct {
	workspace  event.UUID
	rule       event.UUID
	version    int32
	eventID    event.UUID
	occurredAt time.Time
	customer   string // UUID text, "" for none
	account    string
	score      string // decimal text, "" for none
	details    string // JSON object
	alert      bool
	shadow     bool // a shadow rule's hit: stored, marked, never alerted
}

// hitsOf reads the rows of msg's rule_eval hits; bad counts the hits that
// cannot be stored (malformed, which only a pipeline step between rule_eval
// and this output could cause).
func hitsOf(msg *service.Message, env *event.Envelope) (rows []hitRow, bad int) {
	v, ok := msg.MetaGetMut(metaRuleEval)
	if !ok {
		return nil, 0
	}
	meta, ok := v.(map[string]any)
	if !ok {
		return nil, 1
	}
	var list []any
	switch hs := meta["hits"].(type) {
	case nil:
		return nil, 0
	case []any:
		list = hs
	case []map[string]any:
		for _, h := range hs {
			list = append(list, h)
		}
	default:
		return nil, 1
	}
	if len(list) == 0 {
		// Nearly every event: spare it the parties' IDs.
		return nil, 0
	}
	var customer, account string
	if env.CustomerExternalID != "" {
		customer = event.CustomerID(env.WorkspaceID, env.CustomerExternalID).String()
	}
	if env.AccountExternalID != "" {
		account = event.AccountID(env.WorkspaceID, env.AccountExternalID).String()
	}
	for _, h := range list {
		row, err := hitRowOf(h, env)
		if err != nil {
			bad++
			continue
		}
		row.customer, row.account = customer, account
		rows = append(rows, row)
	}
	return rows, bad
}

var (
	errMalformedHit = errors.New("malformed rule hit")
	// scorePattern is what numeric(9,4), rules.score's and rule_hits.score's
	// type, accepts.
	scorePattern = regexp.MustCompile(`^-?[0-9]{1,5}(\.[0-9]{1,4})?$`)
)

// hitRowOf reads one hit as rule_eval wrote it.
func hitRowOf(v any, env *event.Envelope) (hitRow, error) {
	h, ok := v.(map[string]any)
	if !ok {
		return hitRow{}, errMalformedHit
	}
	row := hitRow{workspace: env.WorkspaceID, eventID: env.ID, occurredAt: env.OccurredAt}
	id, _ := h["rule_id"].(string)
	rule, err := event.ParseUUID(id)
	if err != nil || rule.IsZero() {
		return hitRow{}, errMalformedHit
	}
	row.rule = rule
	version, ok := intOf(h["version"])
	if !ok || version < 1 || version > math.MaxInt32 {
		return hitRow{}, errMalformedHit
	}
	row.version = int32(version)
	if row.score, ok = scoreOf(h["score"]); !ok {
		return hitRow{}, errMalformedHit
	}
	row.alert, _ = h["alert"].(bool)
	row.shadow, _ = h["shadow"].(bool)
	details := map[string]any{"rule": h["rule"], "action": h["action"], "severity": h["severity"], "reads": h["reads"]}
	b, err := json.Marshal(withoutNUL(details))
	if err != nil {
		// A value JSON cannot carry (NaN, a channel): keep the hit, not
		// what it read.
		details["reads"] = map[string]any{}
		if b, err = json.Marshal(withoutNUL(details)); err != nil {
			return hitRow{}, errMalformedHit
		}
	}
	row.details = string(b)
	return row, nil
}

func intOf(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int32:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), n <= math.MaxInt64
	case float64:
		return int64(n), n == math.Trunc(n)
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	case string:
		i, err := strconv.ParseInt(n, 10, 64)
		return i, err == nil
	}
	return 0, false
}

// scoreOf is a hit's score as numeric(9,4) text, "" for none.
func scoreOf(v any) (string, bool) {
	var s string
	switch n := v.(type) {
	case nil:
		return "", true
	case json.Number:
		s = n.String()
	case string:
		s = n
	case int64:
		s = strconv.FormatInt(n, 10)
	case int:
		s = strconv.Itoa(n)
	case float64:
		s = strconv.FormatFloat(n, 'f', -1, 64)
	default:
		return "", false
	}
	if s == "" {
		return "", true
	}
	// Trailing zeros of the fraction say nothing and may exceed its 4 digits.
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s, scorePattern.MatchString(s)
}

// withoutNUL replaces NUL in every string of v, keys included: jsonb refuses
// it (22P05), and a rule hit must not be lost over an event type's bytes.
func withoutNUL(v any) any {
	switch x := v.(type) {
	case string:
		return strings.ReplaceAll(x, "\x00", "\uFFFD")
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[strings.ReplaceAll(k, "\x00", "\uFFFD")] = withoutNUL(e)
		}
		return m
	case []any:
		s := make([]any, len(x))
		for i, e := range x {
			s[i] = withoutNUL(e)
		}
		return s
	}
	return v
}

package decisionapi

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// The answer is written by hand, once per decision for Redis (remembered)
// and once for the client: encoding/json's reflection over decisionResponse
// was twice a decision's JSON work for a few hundred bytes.

// appendDecision appends r as json.Marshal writes it (the same members in
// the same order, strings escaped alike; numbers as the shortest decimal
// that reads back, which for a score or a latency in milliseconds is
// encoding/json's text too).
func appendDecision(dst []byte, r *decisionResponse) []byte {
	dst = append(dst, `{"id":`...)
	dst = event.AppendJSONString(dst, r.ID, true)
	dst = append(dst, `,"external_id":`...)
	dst = event.AppendJSONString(dst, r.ExternalID, true)
	dst = append(dst, `,"decision":`...)
	dst = event.AppendJSONString(dst, string(r.Decision), true)
	dst = append(dst, `,"score":`...)
	dst = strconv.AppendFloat(dst, r.Score, 'f', -1, 64)
	dst = append(dst, `,"rules":[`...)
	for i := range r.Rules {
		h := &r.Rules[i]
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"rule":`...)
		dst = event.AppendJSONString(dst, h.Rule, true)
		dst = append(dst, `,"rule_id":`...)
		dst = event.AppendJSONString(dst, h.RuleID, true)
		dst = append(dst, `,"version":`...)
		dst = strconv.AppendInt(dst, int64(h.Version), 10)
		dst = append(dst, `,"action":`...)
		dst = event.AppendJSONString(dst, h.Action, true)
		dst = append(dst, `,"score":`...)
		dst = strconv.AppendFloat(dst, h.Score, 'f', -1, 64)
		dst = append(dst, '}')
	}
	dst = append(dst, `],"degraded":`...)
	dst = strconv.AppendBool(dst, r.Degraded)
	if r.Reason != "" {
		dst = append(dst, `,"degraded_reason":`...)
		dst = event.AppendJSONString(dst, r.Reason, true)
	}
	dst = append(dst, `,"repeated":`...)
	dst = strconv.AppendBool(dst, r.Repeated)
	dst = append(dst, `,"decided_at":"`...)
	dst = r.DecidedAt.AppendFormat(dst, time.RFC3339Nano)
	dst = append(dst, `","took_ms":`...)
	dst = strconv.AppendFloat(dst, r.TookMS, 'f', -1, 64)
	return append(dst, '}')
}

// answerBufs are the buffers answers are written in, reused: the
// response writer copies what it is given.
var answerBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// writeDecision answers r with 200, as apirequest.WriteJSON would.
func writeDecision(w http.ResponseWriter, r *decisionResponse) int {
	buf := answerBufs.Get().(*[]byte)
	b := append(appendDecision((*buf)[:0], r), '\n')
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	if cap(b) <= 64<<10 {
		*buf = b[:0]
		answerBufs.Put(buf)
	}
	return http.StatusOK
}

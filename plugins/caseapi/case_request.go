package caseapi

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// Limits of the case API's input, documented in case_openapi.json.
const (
	pageSizeDefault = 50
	pageSizeMax     = 200
	maxActorLen     = 120
	maxAssigneeLen  = 120
	maxTextLen      = 10000
	// actorHeader names the acting analyst when the body does not.
	actorHeader = "X-SpeculaPro-Actor"
)

// Statuses, priorities and dispositions as the cases table's CHECKs allow.
var (
	caseStatuses     = []string{"open", "investigating", "closed"}
	casePriorities   = []string{"low", "medium", "high", "critical"}
	caseDispositions = []string{"true_positive", "false_positive", "inconclusive"}
)

// listQuery is a validated GET /v1/cases.
type listQuery struct {
	status, priority, assignee string
	customer                   *event.UUID
	from, to                   *time.Time
	after                      *pageCursor
	limit                      int
}

// pageCursor is where the previous page ended: cases come newest first,
// ordered by (opened_at, id), so the next page is what sorts below it.
type pageCursor struct {
	openedAt time.Time
	id       event.UUID
}

func (c pageCursor) String() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.openedAt.UTC().Format(time.RFC3339Nano) + "|" + c.id.String()))
}

func parseCursor(s string) (*pageCursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not a cursor this API gave")
	}
	at, id, ok := strings.Cut(string(raw), "|")
	if !ok {
		return nil, errors.New("not a cursor this API gave")
	}
	var c pageCursor
	if c.openedAt, err = time.Parse(time.RFC3339Nano, at); err != nil {
		return nil, errors.New("not a cursor this API gave")
	}
	if c.id, err = event.ParseUUID(id); err != nil {
		return nil, errors.New("not a cursor this API gave")
	}
	return &c, nil
}

// parseListQuery reads the filters of GET /v1/cases; every fault names its
// parameter.
func parseListQuery(q url.Values) (listQuery, []apirequest.FieldError) {
	lq := listQuery{limit: pageSizeDefault}
	var errs []apirequest.FieldError
	bad := func(field, format string, args ...any) {
		errs = append(errs, apirequest.FieldError{Field: field, Message: fmt.Sprintf(format, args...)})
	}
	for name, vs := range q {
		if len(vs) != 1 {
			bad(name, "give it once")
			continue
		}
		v := vs[0]
		switch name {
		case "status":
			lq.status = v
			if !slices.Contains(caseStatuses, v) {
				bad(name, "one of %s", strings.Join(caseStatuses, ", "))
			}
		case "priority":
			lq.priority = v
			if !slices.Contains(casePriorities, v) {
				bad(name, "one of %s", strings.Join(casePriorities, ", "))
			}
		case "assignee":
			lq.assignee = v
			if msg := checkName(v, maxAssigneeLen); msg != "" {
				bad(name, "%s", msg)
			}
		case "customer_id":
			u, err := event.ParseUUID(v)
			if err != nil {
				bad(name, "not a UUID")
			}
			lq.customer = &u
		case "opened_from", "opened_to":
			t, err := time.Parse(time.RFC3339Nano, v)
			if err != nil {
				bad(name, "not an RFC 3339 time (2026-01-31T09:00:00Z)")
			}
			if name == "opened_from" {
				lq.from = &t
			} else {
				lq.to = &t
			}
		case "cursor":
			c, err := parseCursor(v)
			if err != nil {
				bad(name, "%v", err)
			}
			lq.after = c
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > pageSizeMax {
				bad(name, "a whole number from 1 to %d", pageSizeMax)
			}
			lq.limit = n
		default:
			bad(name, "unknown parameter")
		}
	}
	if lq.from != nil && lq.to != nil && !lq.from.Before(*lq.to) {
		bad("opened_to", "must be later than opened_from")
	}
	slices.SortFunc(errs, func(a, b apirequest.FieldError) int { return strings.Compare(a.Field, b.Field) })
	return lq, errs
}

// checkName is the fault of an analyst's or assignee's name ("": none): it
// is printed in timelines and webhooks, so it is short, valid UTF-8, with no
// control characters and not blank.
func checkName(s string, maxLen int) string {
	switch {
	case strings.TrimSpace(s) == "":
		return "required, not blank"
	case len(s) > maxLen:
		return fmt.Sprintf("at most %d bytes", maxLen)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.IndexFunc(s, unicode.IsControl) >= 0:
		return "control characters are not allowed"
	}
	return ""
}

// checkText is the fault of a comment or a note ("": none).
func checkText(s string, required bool) string {
	switch {
	case required && strings.TrimSpace(s) == "":
		return "required, not blank"
	case len(s) > maxTextLen:
		return fmt.Sprintf("at most %d bytes", maxTextLen)
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	}
	return ""
}

// changeKind is one of the changes the API makes to a case; each is one
// case event and one outbox event type.
type changeKind string

const (
	changeAssigned      changeKind = "assigned"
	changeCommented     changeKind = "commented"
	changeStatusChanged changeKind = "status_changed"
	changeClosed        changeKind = "closed"
	changeReopened      changeKind = "reopened"
)

// eventType is the change's outbox event type, as webhook endpoints name it
// in event_types.
func (k changeKind) eventType() string { return "case." + string(k) }

// changeFields are the body fields each change takes (actor: all of them).
var changeFields = map[changeKind][]string{
	changeAssigned:      {"actor", "assignee"},
	changeCommented:     {"actor", "comment"},
	changeStatusChanged: {"actor", "status"},
	changeClosed:        {"actor", "disposition", "note"},
	changeReopened:      {"actor", "note"},
}

// change is a validated change request.
type change struct {
	kind    changeKind
	version int64
	actor   string
	// assignee: nil unassigns. comment, status, disposition, note: the
	// change's own fields.
	assignee                           *string
	comment, status, disposition, note string
}

// body is the case event's body: the change's details.
func (c change) body() map[string]any {
	switch c.kind {
	case changeAssigned:
		return map[string]any{"assignee": c.assignee}
	case changeCommented:
		return map[string]any{"comment": c.comment}
	case changeStatusChanged:
		return map[string]any{"to": c.status}
	case changeClosed:
		return map[string]any{"disposition": c.disposition, "note": c.note}
	}
	return map[string]any{"note": c.note}
}

// Why a change request is refused before its body is read.
var (
	// errNoIfMatch: no If-Match (428).
	errNoIfMatch = errors.New("If-Match is required: send the ETag (the case's version) you read, e.g. If-Match: \"3\"")
)

// parseIfMatch reads the version a change was based on: If-Match: "3" (the
// ETag the API gave) or 3.
func parseIfMatch(h http.Header) (int64, *apirequest.FieldError, error) {
	v := strings.TrimSpace(h.Get("If-Match"))
	if v == "" {
		return 0, nil, errNoIfMatch
	}
	n, err := strconv.ParseInt(strings.Trim(v, `"`), 10, 64)
	if err != nil || n < 1 {
		return 0, &apirequest.FieldError{Field: "If-Match", Message: `the case's ETag as given, e.g. "3"`}, nil
	}
	return n, nil, nil
}

// etag is a case version as the ETag header carries it.
func etag(version int64) string { return `"` + strconv.FormatInt(version, 10) + `"` }

// parseChange reads a change's JSON body; the actor comes from the body's
// actor or, when it has none, the X-SpeculaPro-Actor header.
func parseChange(kind changeKind, body []byte, header http.Header) (change, []apirequest.FieldError) {
	c := change{kind: kind}
	var errs []apirequest.FieldError
	bad := func(field, msg string) { errs = append(errs, apirequest.FieldError{Field: field, Message: msg}) }
	fields := map[string]json.RawMessage{}
	if len(strings.TrimSpace(string(body))) > 0 {
		if err := json.Unmarshal(body, &fields); err != nil {
			return c, []apirequest.FieldError{{Field: "", Message: "the body is not a JSON object"}}
		}
	}
	str := func(name string, dst *string) bool {
		raw, ok := fields[name]
		if !ok {
			return false
		}
		if err := json.Unmarshal(raw, dst); err != nil {
			bad(name, "must be a string")
			return false
		}
		return true
	}
	for name := range fields {
		if !slices.Contains(changeFields[kind], name) {
			bad(name, "unknown field")
		}
	}
	if !str("actor", &c.actor) {
		c.actor = header.Get(actorHeader)
	}
	if msg := checkName(c.actor, maxActorLen); msg != "" {
		bad("actor", msg+" (the analyst making the change, in the body or "+actorHeader+")")
	}
	switch kind {
	case changeAssigned:
		raw, ok := fields["assignee"]
		switch {
		case !ok:
			bad("assignee", "required (null unassigns)")
		case string(raw) == "null":
		default:
			var a string
			if str("assignee", &a) {
				if msg := checkName(a, maxAssigneeLen); msg != "" {
					bad("assignee", msg)
				}
				c.assignee = &a
			}
		}
	case changeCommented:
		str("comment", &c.comment)
		if msg := checkText(c.comment, true); msg != "" {
			bad("comment", msg)
		}
	case changeStatusChanged:
		str("status", &c.status)
		switch c.status {
		case "open", "investigating":
		case "closed":
			bad("status", "close a case with POST /v1/cases/{id}/close, which takes its disposition")
		default:
			bad("status", "one of open, investigating")
		}
	case changeClosed:
		str("disposition", &c.disposition)
		if !slices.Contains(caseDispositions, c.disposition) {
			bad("disposition", "one of "+strings.Join(caseDispositions, ", "))
		}
		fallthrough
	case changeReopened:
		str("note", &c.note)
		if msg := checkText(c.note, false); msg != "" {
			bad("note", msg)
		}
	}
	slices.SortFunc(errs, func(a, b apirequest.FieldError) int { return strings.Compare(a.Field, b.Field) })
	return c, errs
}

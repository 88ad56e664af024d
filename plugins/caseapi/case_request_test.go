package caseapi

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

func TestParseListQuery(t *testing.T) {
	cur := pageCursor{openedAt: time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC), id: event.UUID{9}}
	for _, c := range []struct {
		query      string
		wantFields string // the fields at fault, comma-separated
		check      func(listQuery) bool
	}{
		{query: "", check: func(q listQuery) bool { return q.limit == pageSizeDefault && q.after == nil }},
		{query: "status=open&priority=high&assignee=ana&limit=200", check: func(q listQuery) bool {
			return q.status == "open" && q.priority == "high" && q.assignee == "ana" && q.limit == 200
		}},
		{query: "customer_id=" + event.UUID{1}.String(), check: func(q listQuery) bool { return *q.customer == event.UUID{1} }},
		{query: "opened_from=2026-01-01T00:00:00Z&opened_to=2026-02-01T00:00:00Z", check: func(q listQuery) bool {
			return q.from.Month() == 1 && q.to.Month() == 2
		}},
		{query: "cursor=" + cur.String(), check: func(q listQuery) bool { return q.after != nil && *q.after == cur }},
		{query: "status=shut", wantFields: "status"},
		{query: "priority=urgent", wantFields: "priority"},
		{query: "limit=0", wantFields: "limit"},
		{query: "limit=201", wantFields: "limit"},
		{query: "limit=ten", wantFields: "limit"},
		{query: "customer_id=42", wantFields: "customer_id"},
		{query: "opened_from=yesterday", wantFields: "opened_from"},
		{query: "opened_from=2026-02-01T00:00:00Z&opened_to=2026-01-01T00:00:00Z", wantFields: "opened_to"},
		{query: "cursor=abc", wantFields: "cursor"},
		{query: "assignee=%20", wantFields: "assignee"},
		{query: "status=open&status=closed", wantFields: "status"},
		{query: "colour=red&limit=-1", wantFields: "colour,limit"},
	} {
		v, err := url.ParseQuery(c.query)
		if err != nil {
			t.Fatal(err)
		}
		q, errs := parseListQuery(v)
		var fields []string
		for _, e := range errs {
			fields = append(fields, e.Field)
		}
		if got := strings.Join(fields, ","); got != c.wantFields {
			t.Errorf("%q: faults in %q, want %q (%v)", c.query, got, c.wantFields, errs)
		}
		if c.check != nil && !c.check(q) {
			t.Errorf("%q: read as %+v", c.query, q)
		}
	}
}

func TestParseChange(t *testing.T) {
	withActor := http.Header{}
	withActor.Set(actorHeader, "ana")
	long := strings.Repeat("x", maxTextLen+1)
	for _, c := range []struct {
		kind       changeKind
		body       string
		header     http.Header
		wantFields string
		check      func(change) bool
	}{
		{kind: changeAssigned, body: `{"actor":"ana","assignee":"bob"}`, check: func(c change) bool { return c.actor == "ana" && *c.assignee == "bob" }},
		{kind: changeAssigned, body: `{"assignee":null}`, header: withActor, check: func(c change) bool { return c.actor == "ana" && c.assignee == nil }},
		{kind: changeAssigned, body: `{"actor":"carl","assignee":"bob"}`, header: withActor, check: func(c change) bool { return c.actor == "carl" }},
		{kind: changeAssigned, body: `{"actor":"ana"}`, wantFields: "assignee"},
		{kind: changeAssigned, body: `{"actor":"ana","assignee":7}`, wantFields: "assignee"},
		{kind: changeAssigned, body: `{"assignee":"bob"}`, wantFields: "actor"},
		{kind: changeAssigned, body: `{"actor":"a\u0000b","assignee":"bob"}`, wantFields: "actor"},
		{kind: changeAssigned, body: `{"actor":"` + strings.Repeat("a", maxActorLen+1) + `","assignee":"bob"}`, wantFields: "actor"},
		{kind: changeCommented, body: `{"comment":"ok"}`, header: withActor, check: func(c change) bool { return c.comment == "ok" }},
		{kind: changeCommented, body: `{"comment":""}`, header: withActor, wantFields: "comment"},
		{kind: changeCommented, body: `{"comment":"` + long + `"}`, header: withActor, wantFields: "comment"},
		{kind: changeCommented, body: `{"comment":"ok","status":"open"}`, header: withActor, wantFields: "status"},
		{kind: changeStatusChanged, body: `{"status":"investigating"}`, header: withActor, check: func(c change) bool { return c.status == "investigating" }},
		{kind: changeStatusChanged, body: `{"status":"closed"}`, header: withActor, wantFields: "status"},
		{kind: changeStatusChanged, body: `{}`, header: withActor, wantFields: "status"},
		{kind: changeClosed, body: `{"disposition":"false_positive","note":"n"}`, header: withActor, check: func(c change) bool {
			return c.disposition == "false_positive" && c.note == "n"
		}},
		{kind: changeClosed, body: `{"disposition":"fraud"}`, header: withActor, wantFields: "disposition"},
		{kind: changeClosed, body: `{"note":"` + long + `"}`, wantFields: "actor,disposition,note"},
		{kind: changeReopened, body: ``, header: withActor, check: func(c change) bool { return c.note == "" }},
		{kind: changeReopened, body: `[1]`, header: withActor, wantFields: ""},
	} {
		got, errs := parseChange(c.kind, []byte(c.body), c.header)
		var fields []string
		for _, e := range errs {
			fields = append(fields, e.Field)
		}
		if c.body == `[1]` {
			if len(errs) != 1 || !strings.Contains(errs[0].Message, "not a JSON object") {
				t.Errorf("%s %s: %v, want one fault: not a JSON object", c.kind, c.body, errs)
			}
			continue
		}
		if g := strings.Join(fields, ","); g != c.wantFields {
			t.Errorf("%s %.60s: faults in %q, want %q (%v)", c.kind, c.body, g, c.wantFields, errs)
		}
		if c.check != nil && !c.check(got) {
			t.Errorf("%s %.60s: read as %+v", c.kind, c.body, got)
		}
	}
}

func TestParseIfMatch(t *testing.T) {
	for _, c := range []struct {
		header  string
		want    int64
		missing bool
		bad     bool
	}{
		{header: `"3"`, want: 3},
		{header: `12`, want: 12},
		{header: ``, missing: true},
		{header: `*`, bad: true},
		{header: `"0"`, bad: true},
		{header: `W/"3"`, bad: true},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set("If-Match", c.header)
		}
		v, ferr, err := parseIfMatch(h)
		if (err != nil) != c.missing || (ferr != nil) != c.bad || !c.missing && !c.bad && v != c.want {
			t.Errorf("If-Match %q: %d, %v, %v", c.header, v, ferr, err)
		}
	}
	if etag(3) != `"3"` {
		t.Errorf("etag(3) = %s", etag(3))
	}
}

// listSQL names only the filters given, each as an argument, never as text.
func TestListSQL(t *testing.T) {
	ws := event.UUID{1}
	sql, args := listSQL(ws, listQuery{status: "open'; DROP TABLE x; --", limit: 50, after: &pageCursor{id: event.UUID{2}}})
	if strings.Contains(sql, "DROP") || len(args) != 5 || args[len(args)-1] != 51 {
		t.Errorf("listSQL: %s %v", sql, args)
	}
	if sql, _ := listSQL(ws, listQuery{limit: 50}); strings.Contains(sql, "c.status =") || strings.Contains(sql, "c.opened_at, c.id) <") {
		t.Errorf("listSQL without filters filters: %s", sql)
	}
}

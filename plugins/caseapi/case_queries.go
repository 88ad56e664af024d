package caseapi

import (
	"github.com/speculapro/speculapro/internal/event"
)

// Query is one statement the API runs, with its arguments.
type Query struct {
	Name string
	SQL  string
	Args []any
}

// ReadQueries are the statements behind the two reads analysts make most,
// exactly as the API runs them (each in workspace ws's session): the first
// page of open cases (pageSize of them), and case id with its alerts, their
// hits and its timeline. The benchmark explains them (EXPLAIN ANALYZE) so
// their plans are reported beside the latencies.
func ReadQueries(ws, id event.UUID, pageSize int) []Query {
	list, args := listSQL(ws, listQuery{status: "open", limit: pageSize})
	return []Query{
		{Name: "list open cases", SQL: list, Args: args},
		{Name: "case", SQL: getCaseSQL, Args: []any{id, ws}},
		{Name: "case alerts and hits", SQL: getAlertsSQL, Args: []any{id, ws}},
		{Name: "case events", SQL: getEventsSQL, Args: []any{id, ws}},
	}
}

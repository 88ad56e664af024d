package caseevent

// CaseKeys are the keys of a body's case object, in the order written: the
// case as it is after the change, each key a column of speculapro.cases of
// the same name.
var CaseKeys = []string{"id", "title", "status", "priority", "assignee", "customer_id", "account_id", "group_key",
	"disposition", "opened_at", "version"}

// EventKeys are the keys of a body's event object: the case event's kind
// (opened, alert_attached, assigned, …), who made it (an analyst, or
// "stream") and its details.
var EventKeys = []string{"kind", "actor", "body"}

// CaseSQL is the jsonb expression of a body's case object (CaseKeys), read
// from the speculapro.cases row aliased c as it is after the change. A
// constant, so the statements that use it stay constants.
//
// A body is
//
//	jsonb_build_object('type', 'case.' || <kind>, 'id', <case event id>, 'workspace_id', …, 'created_at', …,
//	                   'case', CaseSQL, 'event', jsonb_build_object('kind', …, 'actor', …, 'body', …))
//
// with, for case.alert_attached, the alert beside them as alert.created
// carries it.
const CaseSQL = `jsonb_build_object('id', c.id, 'title', c.title, 'status', c.status, 'priority', c.priority,
                   'assignee', c.assignee, 'customer_id', c.customer_id, 'account_id', c.account_id,
                   'group_key', c.group_key, 'disposition', c.disposition, 'opened_at', c.opened_at,
                   'version', c.version)`

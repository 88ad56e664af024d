package caseevent

// BodyKeys are the keys of a case.* body: the event type ('case.' and the
// case event's kind), the case event's id (the receiver's idempotency key),
// the workspace, when the case event was written, the case (CaseKeys) and
// the case event (EventKeys). Every case.* body has these and no other, so
// what a step concerns (the alert it attached, the assignee it set) is in
// the event's body.
var BodyKeys = []string{"type", "id", "workspace_id", "created_at", "case", "event"}

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
// and nothing else (BodyKeys), whichever the kind.
const CaseSQL = `jsonb_build_object('id', c.id, 'title', c.title, 'status', c.status, 'priority', c.priority,
                   'assignee', c.assignee, 'customer_id', c.customer_id, 'account_id', c.account_id,
                   'group_key', c.group_key, 'disposition', c.disposition, 'opened_at', c.opened_at,
                   'version', c.version)`

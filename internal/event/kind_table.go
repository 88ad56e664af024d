package event

// Tables the kinds of event are stored in (schema speculapro).
const (
	TableTransactions  = "transactions"
	TableAccountEvents = "account_events"
)

// Table names the table events of kind k are stored in, which is also the
// label `table` of the metrics of every role that handles them.
func (k Kind) Table() string {
	if k == KindAccountEvent {
		return TableAccountEvents
	}
	return TableTransactions
}

// Package backtest replays a workspace's stored history through the live
// feature code and rules: what rules would have fired on over a period.
//
// It reads the workspace's transactions and account events from
// PostgreSQL in one read-only transaction bound to the workspace by
// row-level security (history.go; their accounts, customers and
// counterparties read once, parties.go), applies them to the running totals in
// memory (features.Memory: the stream's own computation, without Redis) in
// the order the stream applied them, from the longest window before the
// period on, evaluates the rules of the given files and the workspace's
// enabled rules (live and shadow) on every event of the period, and counts
// per rule its hits, the accounts and customers hit, the alerts it would
// raise (none for a shadow rule), how many of those events the live rules
// already alerted on, and the hits per day (report.go). It writes nothing
// anywhere.
//
// # Order
//
// The stream applies an account's transactions in the order the ingest
// API accepted them (the Kafka partition of the account) and a customer's
// account events likewise. received_at records that acceptance: the
// backtest applies events by received_at, then occurred_at, then id. Two
// events accepted in the same microsecond (one ingest request stamps all
// its events with one time) are thus applied in occurred_at order, where
// the stream followed the request's order. Entities that several
// partitions feed (a customer with several accounts, a counterparty paid
// by several accounts, a customer's transactions and account events, which
// two pipelines apply) see their events in the order the stream's
// processes happened to apply them, which received_at follows up to the
// stream's lag.
//
// # Customers
//
// A transaction sent without its customer was counted by the stream on no
// customer; the persister stored it with its account's customer, or, when
// the account was not stored yet, with a placeholder customer named after
// the account (event.OrphanCustomerPrefix). The replay takes such a
// placeholder for no customer, as the stream did; a real customer it cannot
// tell from one the transaction named, and counts the transaction on it.
package backtest

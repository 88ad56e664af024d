// Package apirequest is what SpeculaPro's two HTTP APIs (the ingest_api
// input in plugins/ingestapi, the decision_api input in plugins/decisionapi)
// share to take a request:
//
//   - the request front (request_front.go, request_budget.go,
//     body_rate.go): the server and its routes, API keys looked up by their
//     hash and cached (keys.go), per-workspace and per-key body budgets and
//     shares, the minimum body rate, and the answers every route writes
//     (answer.go);
//   - the item reader: one check of a body's JSON (request_wire.go) and one
//     field reader (request_fields.go, request_values.go) that reads an item
//     of an ingest batch and a decision's transaction alike, with the same
//     fields, limits and messages (items.go), writing each valid item's
//     Kafka record into buffers a request reuses (slab.go, record.go).
package apirequest

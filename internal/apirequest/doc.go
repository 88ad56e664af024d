// Package api holds SpeculaPro's two HTTP APIs, which share this package
// (docs/architecture.md, "Repository layout", says why):
//
//   - the ingest_api input authenticates each request by its workspace's API
//     key, validates every item of a batch (answering each one accepted,
//     duplicate, rejected or retry), gives each valid item its fixed ID,
//     hands a request's new items to the pipeline as one batch and answers
//     only after the output acknowledged them (acks from all in-sync
//     replicas), so nothing is accepted that is not safely in Kafka.
//     Customers and accounts are written straight to PostgreSQL as the app
//     role bound to the caller's workspace. Its OpenAPI document, served at
//     /v1/openapi.json, is openapi.json in this directory (ingest_*.go).
//   - the decision_api input takes one transaction (read as the ingest API
//     reads an item) and answers approve, review or decline within its
//     timeout from the workspace's real-time rules; the decided transaction
//     goes on through the pipeline (to redis_spool and Kafka). Its OpenAPI
//     document, served at /v1/decisions/openapi.json, is
//     decision_openapi.json (decision_*.go).
//
// Both serve through one request front (request_front.go, request_budget.go:
// API keys, per-workspace body budgets and shares, the server) and read the
// body with one check of its JSON (request_wire.go).
package api

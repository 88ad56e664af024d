// Package ingestapi is the ingest_api input. It authenticates each request
// by its workspace's API key, validates every item of a batch (answering each
// one accepted, duplicate, rejected or retry), gives each valid item its
// fixed ID, hands a request's new items to the pipeline as one batch and
// answers only after the output acknowledged them (acks from all in-sync
// replicas), so nothing is accepted that is not safely in Kafka. Customers
// and accounts are written straight to PostgreSQL as the app role bound to
// the caller's workspace. Its OpenAPI document, served at /v1/openapi.json,
// is openapi.json in this directory.
//
// It serves through the request front and reads its items with the item
// reader of internal/apirequest, which the decision API shares.
package ingestapi

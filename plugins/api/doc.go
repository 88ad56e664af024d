// Package api holds the ingest_api input: SpeculaPro's HTTP ingest API. It
// authenticates each request by its workspace's API key, validates every
// item of a batch (answering each one accepted, duplicate, rejected or
// retry), gives each valid item its fixed ID, hands a request's new items to
// the pipeline as one batch and answers only after the output acknowledged
// them (acks from all in-sync replicas), so nothing is accepted that is not
// safely in Kafka. Customers and accounts are written straight to
// PostgreSQL as the app role bound to the caller's workspace. The OpenAPI
// document served at /v1/openapi.json is openapi.json in this directory.
package api

// Package decisionapi is the decision_api input. It takes one transaction
// (read as the ingest API reads an item) and answers approve, review or
// decline within its timeout from the workspace's real-time rules; the
// decided transaction goes on through the pipeline (to redis_spool and
// Kafka). Its OpenAPI document, served at /v1/decisions/openapi.json, is
// decision_openapi.json in this directory.
//
// It serves through the request front and reads its transaction with the
// item reader of internal/apirequest, which the ingest API shares.
package decisionapi

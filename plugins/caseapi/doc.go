// Package caseapi is the case_api input: the HTTP API analysts' tools call
// to list cases, read one with its alerts, their rule hits and the feature
// values each rule read, and change it (assign, comment, status, close with
// a disposition, reopen). Every query runs as the app role bound to the API
// key's workspace by row-level security; every change is one statement that
// updates the case only at the version the request saw (If-Match), appends
// its case event and queues its webhook deliveries. Its OpenAPI document,
// served at /v1/cases/openapi.json, is case_openapi.json in this directory.
//
// It serves through the request front of internal/apirequest (API keys and
// their scopes, body limits), which the ingest and decision APIs share.
package caseapi

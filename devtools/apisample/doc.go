// Package apisample holds the sample requests the tests of both HTTP APIs
// (plugins/ingestapi, plugins/decisionapi) and of the item reader they share
// (internal/apirequest) send: one valid transaction with every field, a
// batch of items, an item with one field changed, and the workspace, clock
// and counterparty protector the tests read them with.
package apisample

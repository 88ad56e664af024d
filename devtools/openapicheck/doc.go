// Package openapicheck holds what the contract tests of both HTTP APIs
// (plugins/ingestapi, plugins/decisionapi) read their OpenAPI documents
// with: the part of a document they read, a check that it names exactly the
// served routes (security where a route is authenticated), and a validator
// of a decoded JSON answer or request against a schema of the document.
package openapicheck

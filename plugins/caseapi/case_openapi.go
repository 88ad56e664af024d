package caseapi

import _ "embed"

// caseOpenAPIDocument is the case API's contract, served at
// /v1/cases/openapi.json and tested against the handlers
// (case_openapi_test.go).
//
//go:embed case_openapi.json
var caseOpenAPIDocument []byte

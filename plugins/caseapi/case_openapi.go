package caseapi

import (
	_ "embed"
	"net/http"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// caseOpenAPIDocument is the case API's contract, tested against the
// handlers (case_openapi_test.go).
//
//go:embed case_openapi.json
var caseOpenAPIDocument []byte

func handleCaseOpenAPI(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	return apirequest.WriteDocument(w, caseOpenAPIDocument)
}

package ingestapi

import (
	_ "embed"
	"net/http"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// openAPIDocument is the API's contract, kept in the repository beside the
// handlers and tested against them (ingest_openapi_test.go).
//
//go:embed openapi.json
var openAPIDocument []byte

func handleOpenAPI(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	return apirequest.WriteDocument(w, openAPIDocument)
}

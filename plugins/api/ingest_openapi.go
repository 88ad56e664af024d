package api

import (
	_ "embed"
	"net/http"

	"github.com/speculapro/speculapro/internal/event"
)

// openAPIDocument is the API's contract, kept in the repository beside the
// handlers and tested against them (ingest_openapi_test.go).
//
//go:embed openapi.json
var openAPIDocument []byte

func handleOpenAPI(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
	return http.StatusOK
}

package decisionapi

import (
	_ "embed"
	"net/http"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
)

// decisionOpenAPIDocument is the decision API's contract, tested against
// the handler (decision_openapi_test.go).
//
//go:embed decision_openapi.json
var decisionOpenAPIDocument []byte

func handleDecisionOpenAPI(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	return apirequest.WriteDocument(w, decisionOpenAPIDocument)
}

package apirequest

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/speculapro/speculapro/internal/event"
)

// ProbeTimeout bounds each readiness probe and each database call on
// the request path that has no item deadline of its own.
const ProbeTimeout = 2 * time.Second

// ErrorResponse is every error answer's body.
type ErrorResponse struct {
	Error string `json:"error"`
}

func WriteError(w http.ResponseWriter, code int, err error) int {
	return WriteJSON(w, code, ErrorResponse{Error: err.Error()})
}

func WriteJSON(w http.ResponseWriter, code int, v any) int {
	b, err := json.Marshal(v)
	if err != nil {
		code, b = http.StatusInternalServerError, []byte(`{"error":"cannot encode the answer"}`)
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_, _ = w.Write(append(b, '\n'))
	return code
}

func HandleHealth(w http.ResponseWriter, _ *http.Request, _ event.UUID) int {
	return WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

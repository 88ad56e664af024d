package ingestapi

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/apirequest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/pgclass"
)

// entityTimeout bounds one customer or account write.
const entityTimeout = 10 * time.Second

// entityResponse answers a customer or account PUT.
type entityResponse struct {
	ID         string `json:"id"`
	ExternalID string `json:"external_id"`
	Status     string `json:"status"` // created or updated
}

// rejectedResponse answers a PUT whose body fails validation.
type rejectedResponse struct {
	Error  string                  `json:"error"`
	Errors []apirequest.FieldError `json:"errors"`
}

// readEntity validates the path's external_id and decodes the body into a
// apirequest.FieldReader; a non-zero code means the answer was written.
func (a *ingestAPI) readEntity(w http.ResponseWriter, r *http.Request) (string, *apirequest.FieldReader, int) {
	// Our own words: the database's would describe its encoding (a NUL or
	// invalid UTF-8 it refuses), not the client's fault.
	ext := r.PathValue("external_id")
	if err := event.CheckExternalID(ext); err != nil {
		a.Log.Debugf("ingest_api: external_id in the path refused: %v", err)
		return "", nil, apirequest.WriteError(w, http.StatusBadRequest, fmt.Errorf("external_id in the path: want 1 to %d bytes of UTF-8 text without control characters, not only whitespace", apirequest.MaxIDLen))
	}
	body, code, err := a.ReadBody(w, r)
	if err != nil {
		return "", nil, apirequest.WriteError(w, code, err)
	}
	// The one check of a body (request_wire.go); a fault in it refuses the
	// body as a whole, named at its field.
	fault, err := apirequest.CheckBody(body, apirequest.FramingObject)
	if err == nil && fault != nil {
		err = apirequest.FaultError(fault)
	}
	if err != nil {
		return "", nil, apirequest.WriteError(w, http.StatusBadRequest, err)
	}
	fr, err := apirequest.NewFieldReader(body, "")
	if err != nil {
		return "", nil, apirequest.WriteError(w, http.StatusBadRequest, fmt.Errorf("%w: want a JSON object", apirequest.ErrMalformed))
	}
	fr.Checked = true
	return ext, fr, 0
}

// finishEntity refuses unknown fields and reports validation errors; a
// non-zero code means the answer was written.
func finishEntity(w http.ResponseWriter, fr *apirequest.FieldReader) int {
	if unknown := fr.UnknownFields(); len(unknown) > 0 {
		return apirequest.WriteError(w, http.StatusBadRequest, fmt.Errorf("%w %s", apirequest.ErrUnknownField, apirequest.QuoteAll(unknown)))
	}
	if len(*fr.Errs) > 0 {
		return apirequest.WriteJSON(w, http.StatusUnprocessableEntity, rejectedResponse{Error: "validation failed", Errors: *fr.Errs})
	}
	return 0
}

// handleCustomer creates or replaces a customer: the real record replaces
// the placeholder a transaction may have created, keeping its ID.
func (a *ingestAPI) handleCustomer(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
	ext, fr, code := a.readEntity(w, r)
	if code != 0 {
		return code
	}
	kind := fr.Enum("kind", false, "person", "business")
	name := fr.Str("name", false, apirequest.MaxNameLen)
	country := fr.Country("country")
	risk := fr.Enum("risk_level", false, "low", "medium", "high")
	attrs := fr.Object("attributes")
	if code := finishEntity(w, fr); code != 0 {
		return code
	}
	id := event.CustomerID(ws, ext)
	var created bool
	err := a.writeEntity(r.Context(), ws, func(ctx context.Context, tx pgx.Tx) error {
		return tx.QueryRow(ctx, `
INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder, kind, name, country, risk_level, attributes)
VALUES ($1, $2, $3, false, $4, $5, $6, $7, COALESCE($8::jsonb, '{}'))
ON CONFLICT (workspace_id, external_id) DO UPDATE
   SET placeholder = false, kind = EXCLUDED.kind, name = EXCLUDED.name, country = EXCLUDED.country,
       risk_level = EXCLUDED.risk_level, attributes = EXCLUDED.attributes, updated_at = now()
RETURNING (xmax = 0)`,
			id, ws, ext, nullable(kind), nullable(name), nullable(country), nullable(risk), jsonOrNil(attrs)).Scan(&created)
	})
	return a.answerEntity(w, "customer", id, ext, created, err)
}

// handleAccount creates or replaces an account. Its customer is created as
// a placeholder when missing, as the persister does, so accounts and
// customers may arrive in any order. The account number is stored only
// encrypted, masked and fingerprinted.
func (a *ingestAPI) handleAccount(w http.ResponseWriter, r *http.Request, ws event.UUID) int {
	ext, fr, code := a.readEntity(w, r)
	if code != 0 {
		return code
	}
	customer := fr.ExternalID("customer_external_id", true)
	kind := fr.Str("kind", false, apirequest.MaxLabelLen)
	currency := fr.Currency("currency", false)
	status := fr.Str("status", false, apirequest.MaxLabelLen)
	number, numberKind := fr.Identifier("number", "number_kind")
	now := time.Now().UTC()
	opened := fr.Time("opened_at", false, now)
	closed := fr.Time("closed_at", false, now)
	if !opened.IsZero() && !closed.IsZero() && closed.Before(opened) {
		fr.Fail("closed_at", "before opened_at")
	}
	attrs := fr.Object("attributes")
	if code := finishEntity(w, fr); code != 0 {
		return code
	}
	var enc, fp []byte
	var masked *string
	if number != "" {
		p, err := a.protector.Protect(ws, identity.FieldAccountNumber, identity.Kind(numberKind), number)
		if err != nil {
			// Validated above, so only the key ring can fail here.
			a.Log.Errorf("ingest_api: protecting an account number: %v", err)
			return apirequest.WriteError(w, http.StatusInternalServerError, errors.New("cannot protect the account number"))
		}
		enc, masked = []byte(p.Enc), &p.Masked
		if fp, err = hex.DecodeString(p.FP); err != nil {
			return apirequest.WriteError(w, http.StatusInternalServerError, errors.New("cannot protect the account number"))
		}
	}
	id := event.AccountID(ws, ext)
	customerID := event.CustomerID(ws, customer)
	var created bool
	err := a.writeEntity(r.Context(), ws, func(ctx context.Context, tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO speculapro.customers (id, workspace_id, external_id, placeholder) VALUES ($1, $2, $3, true)
ON CONFLICT (workspace_id, external_id) DO NOTHING`, customerID, ws, customer); err != nil {
			return fmt.Errorf("creating the placeholder customer: %w", err)
		}
		return tx.QueryRow(ctx, `
INSERT INTO speculapro.accounts (id, workspace_id, external_id, customer_id, placeholder, kind, currency, status,
       number_encrypted, number_masked, number_fingerprint, opened_at, closed_at, attributes)
VALUES ($1, $2, $3, $4, false, $5, $6, $7, $8, $9, $10, $11, $12, COALESCE($13::jsonb, '{}'))
ON CONFLICT (workspace_id, external_id) DO UPDATE
   SET customer_id = EXCLUDED.customer_id, placeholder = false, kind = EXCLUDED.kind,
       currency = EXCLUDED.currency, status = EXCLUDED.status, number_encrypted = EXCLUDED.number_encrypted,
       number_masked = EXCLUDED.number_masked, number_fingerprint = EXCLUDED.number_fingerprint,
       opened_at = EXCLUDED.opened_at, closed_at = EXCLUDED.closed_at, attributes = EXCLUDED.attributes,
       updated_at = now()
RETURNING (xmax = 0)`,
			id, ws, ext, customerID, nullable(kind), nullable(currency), nullable(status), enc, masked, fp,
			nullableTime(opened), nullableTime(closed), jsonOrNil(attrs)).Scan(&created)
	})
	return a.answerEntity(w, "account", id, ext, created, err)
}

func (a *ingestAPI) writeEntity(ctx context.Context, ws event.UUID, fn func(context.Context, pgx.Tx) error) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), entityTimeout)
	defer cancel()
	return a.inWorkspace(ctx, ws, func(tx pgx.Tx) error { return fn(ctx, tx) })
}

// answerEntity maps the write's outcome: a value the database refuses is
// the client's (422), anything else is ours or PostgreSQL's (503, retry).
func (a *ingestAPI) answerEntity(w http.ResponseWriter, what string, id event.UUID, ext string, created bool, err error) int {
	if err != nil {
		if pgclass.IsRowFault(err) {
			// The database's own text stays in the log: it can quote
			// values and describes the schema, not the request.
			code, _ := pgclass.Code(err)
			a.Log.Warnf("ingest_api: the database refused a %s: %v", what, err)
			return apirequest.WriteError(w, http.StatusUnprocessableEntity, fmt.Errorf("the database refused the %s (SQLSTATE %s, %s); check its fields against the API's limits", what, code, pgclass.Reason(err)))
		}
		a.Log.Warnf("ingest_api: writing a %s: %v", what, err)
		return apirequest.WriteError(w, http.StatusServiceUnavailable, fmt.Errorf("cannot write the %s now; send it again", what))
	}
	resp := entityResponse{ID: id.String(), ExternalID: ext, Status: "updated"}
	code := http.StatusOK
	if created {
		resp.Status, code = "created", http.StatusCreated
	}
	return apirequest.WriteJSON(w, code, resp)
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func nullableTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

func jsonOrNil(b json.RawMessage) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

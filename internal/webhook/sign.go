package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Headers of every delivery. The first three are the Standard Webhooks
// ones, what receivers verify and deduplicate on; the SpeculaPro ones are
// informational and not signed (the body's "type" is).
const (
	HeaderID        = "webhook-id"            // the event's ID: the same on every attempt
	HeaderTimestamp = "webhook-timestamp"     // the attempt's time, Unix seconds
	HeaderSignature = "webhook-signature"     // "v1,<base64>" per signing secret, space-separated
	HeaderEvent     = "X-SpeculaPro-Event"    // the event type, e.g. alert.created
	HeaderDelivery  = "X-SpeculaPro-Delivery" // the delivery row's ID (one per endpoint and event)
)

// Headers of the earlier signing scheme, sent beside the standard ones while
// legacy headers are on (outbox_send's legacy_headers), for receivers still
// written for them. Their signature does not cover Idempotency-Key.
const (
	HeaderLegacySignature = "X-SpeculaPro-Signature" // t=<unix>,v1=<hex>[,v1=<hex>]
	HeaderIdempotency     = "Idempotency-Key"        // the same value as webhook-id
)

// Tolerance is how far a delivery's webhook-timestamp may be from the
// receiver's clock, either way, in the Standard Webhooks libraries; Verify
// callers pass it too.
const Tolerance = 5 * time.Minute

// Signing keys are 24 to 64 bytes (the Standard Webhooks bounds).
const (
	minKeyBytes = 24
	maxKeyBytes = 64
)

// Errors of the signing functions and Verify.
var (
	ErrBadSecret          = errors.New("not a signing secret: want whsec_ and the base64 of 24 to 64 bytes")
	ErrBadMessageID       = errors.New("a webhook-id must be non-empty and hold no '.' or space")
	ErrMissingHeaders     = errors.New("webhook-id, webhook-timestamp or webhook-signature missing")
	ErrBadSignatureHeader = errors.New("malformed webhook-timestamp or webhook-signature")
	ErrSignatureMismatch  = errors.New("no signature matches the secret")
	ErrStaleTimestamp     = errors.New("webhook-timestamp outside the tolerance")
)

// SigningKey is the HMAC key a secret stands for: the base64 (standard
// alphabet, padded) after the whsec_ prefix, as the Standard Webhooks
// libraries read it. A secret of the earlier form (whsec_ and 64 hex digits)
// is valid base64 too and stands for 48 bytes, so it signs unchanged.
func SigningKey(secret string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, secretPrefix))
	if err != nil {
		return nil, fmt.Errorf("reading the signing secret: %w", ErrBadSecret)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return nil, fmt.Errorf("reading the signing secret (%d bytes): %w", len(key), ErrBadSecret)
	}
	return key, nil
}

// Sign is the webhook-signature value for the delivery id sent at t with
// body: one "v1,<base64 HMAC-SHA256(key, "<id>.<t>.<body>")>" per secret, in
// order, space-separated (during a rotation's grace period the new secret
// and the old one both sign).
func Sign(id string, t time.Time, body []byte, secrets ...string) (string, error) {
	if id == "" || strings.ContainsAny(id, ". ") {
		return "", ErrBadMessageID
	}
	ts := strconv.FormatInt(t.Unix(), 10)
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := SigningKey(s)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac(key, id, ts, body)))
	}
	return strings.Join(sigs, " "), nil
}

func mac(key []byte, id, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(id))
	m.Write([]byte{'.'})
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// SetHeaders sets h's signing headers for a delivery of body with the event
// id, attempted at t: webhook-id, webhook-timestamp, webhook-signature and,
// when legacy, Idempotency-Key and X-SpeculaPro-Signature.
func SetHeaders(h http.Header, id string, t time.Time, body []byte, secrets []string, legacy bool) error {
	sig, err := Sign(id, t, body, secrets...)
	if err != nil {
		return fmt.Errorf("signing the delivery: %w", err)
	}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(t.Unix(), 10))
	h.Set(HeaderSignature, sig)
	if legacy {
		h.Set(HeaderIdempotency, id)
		h.Set(HeaderLegacySignature, SignLegacy(t, body, secrets...))
	}
	return nil
}

// Verify checks a delivery's headers and body against secret as a Standard
// Webhooks receiver does: the three headers are there, webhook-timestamp is
// within tolerance of now, and some v1 signature matches (compared in
// constant time) the one made over webhook-id, webhook-timestamp and body.
func Verify(h http.Header, body []byte, secret string, now time.Time, tolerance time.Duration) error {
	id, ts, header := h.Get(HeaderID), h.Get(HeaderTimestamp), h.Get(HeaderSignature)
	if id == "" || ts == "" || header == "" {
		return ErrMissingHeaders
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: webhook-timestamp %q", ErrBadSignatureHeader, ts)
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w (%s)", ErrStaleTimestamp, d.Round(time.Second))
	}
	key, err := SigningKey(secret)
	if err != nil {
		return err
	}
	want := mac(key, id, ts, body)
	for _, s := range Signatures(header) {
		got, err := base64.StdEncoding.DecodeString(s)
		if err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return ErrSignatureMismatch
}

// Signatures returns the v1 signatures of a webhook-signature value, in
// order (other versions are skipped, as receivers do).
func Signatures(header string) []string {
	var out []string
	for _, part := range strings.Fields(header) {
		if v, ok := strings.CutPrefix(part, "v1,"); ok {
			out = append(out, v)
		}
	}
	return out
}

// SignLegacy is the X-SpeculaPro-Signature value of the earlier scheme:
// t=<unix> then one v1=<hex HMAC-SHA256(secret, "<t>.<body>")> per secret,
// the key being the whole secret string, prefix included.
func SignLegacy(t time.Time, body []byte, secrets ...string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		m := hmac.New(sha256.New, []byte(s))
		m.Write([]byte(ts))
		m.Write([]byte{'.'})
		m.Write(body)
		b.WriteString(",v1=")
		b.WriteString(hex.EncodeToString(m.Sum(nil)))
	}
	return b.String()
}

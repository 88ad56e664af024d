package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Headers of every delivery.
const (
	HeaderSignature   = "X-SpeculaPro-Signature"
	HeaderEvent       = "X-SpeculaPro-Event"    // the event type, e.g. alert.created
	HeaderDelivery    = "X-SpeculaPro-Delivery" // the delivery row's ID (one per endpoint and event)
	HeaderIdempotency = "Idempotency-Key"       // the event's ID: the same on every attempt
)

// Errors of Verify.
var (
	ErrBadSignatureHeader = errors.New("malformed signature header")
	ErrSignatureMismatch  = errors.New("no signature matches the secret")
	ErrStaleTimestamp     = errors.New("signature timestamp outside the tolerance")
)

// Sign returns the X-SpeculaPro-Signature value for body sent at t: t=<unix>
// then one v1=<hex HMAC-SHA256(secret, "<t>.<body>")> per secret, in order.
func Sign(t time.Time, body []byte, secrets ...string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(ts)
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(mac(s, ts, body))
	}
	return b.String()
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Verify checks header against body and secret as a receiver should: some
// v1 matches (compared in constant time) and t is within tolerance of now.
func Verify(header string, body []byte, secret string, now time.Time, tolerance time.Duration) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrBadSignatureHeader
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrBadSignatureHeader
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w (%s)", ErrStaleTimestamp, d.Round(time.Second))
	}
	want := mac(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return ErrSignatureMismatch
}

// Signatures returns the v1 values of a header, in order (for tests and
// tools that want to know how many secrets signed).
func Signatures(header string) []string {
	var out []string
	for _, part := range strings.Split(header, ",") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "v1="); ok {
			out = append(out, v)
		}
	}
	return out
}

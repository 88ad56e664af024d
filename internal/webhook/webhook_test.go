package webhook

import (
	"context"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

func TestCheckURL(t *testing.T) {
	tests := []struct {
		url      string
		insecure bool
		want     error
	}{
		{"https://hooks.example.com/speculapro", false, nil},
		{"https://hooks.example.com:8443/x?token=1", false, nil},
		{"not a url", false, ErrNotAURL},
		{"", false, ErrNotAURL},
		{"/relative/path", false, ErrNotAURL},
		{"ftp://example.com/x", true, ErrNotAURL},
		{"mailto:someone@example.com", true, ErrNotAURL},
		{"https://user:pass@example.com/", false, ErrNotAURL},
		{"http://hooks.example.com/x", false, ErrInsecureURL},
		{"http://hooks.example.com/x", true, nil},
		{"https://127.0.0.1/x", false, ErrBlockedAddress},
		{"https://[::1]/x", false, ErrBlockedAddress},
		{"https://localhost:8443/x", false, ErrBlockedAddress},
		{"https://api.localhost/x", false, ErrBlockedAddress},
		{"https://10.1.2.3/x", false, ErrBlockedAddress},
		{"https://192.168.0.10/x", false, ErrBlockedAddress},
		{"https://169.254.169.254/latest/meta-data", false, ErrBlockedAddress},
		{"https://100.64.0.1/x", false, ErrBlockedAddress},
		{"https://0.0.0.0/x", false, ErrBlockedAddress},
		{"https://[::ffff:127.0.0.1]/x", false, ErrBlockedAddress},
		{"http://127.0.0.1:8080/x", true, nil},
		{"https://" + strings.Repeat("a", 3000) + ".com/", false, ErrNotAURL},
	}
	for _, tt := range tests {
		err := Policy{AllowInsecure: tt.insecure}.CheckURL(tt.url)
		if tt.want == nil && err != nil || tt.want != nil && !errors.Is(err, tt.want) {
			t.Errorf("CheckURL(%.40q, insecure=%t) = %v, want %v", tt.url, tt.insecure, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), "example.com") {
			t.Errorf("CheckURL's error quotes the URL: %v", err)
		}
	}
}

// The Standard Webhooks libraries' own test vectors (the JavaScript, Go,
// PHP, C# and Java libraries share the first, the Rust library has the
// second): our signature must be theirs byte for byte.
func TestSignMatchesStandardWebhooksVectors(t *testing.T) {
	for _, v := range []struct {
		secret, id string
		ts         int64
		body, want string
	}{
		{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330,
			`{"test": 2432232314}`, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
		{"whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD", "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk", 1649367553,
			`{"email":"test@example.com","username":"test_user"}`, "v1,tZ1I4/hDygAJgO5TYxiSd6Sd0kDW6hPenDe+bTa3Kkw="},
	} {
		got, err := Sign(v.id, time.Unix(v.ts, 0), []byte(v.body), v.secret)
		if err != nil || got != v.want {
			t.Errorf("Sign(%s, %d) = %q, %v; want %q", v.id, v.ts, got, err, v.want)
		}
		h := headers(v.id, v.ts, got)
		if err := Verify(h, []byte(v.body), v.secret, time.Unix(v.ts, 0).Add(Tolerance), Tolerance); err != nil {
			t.Errorf("Verify of the vector %s: %v", v.id, err)
		}
	}
}

func headers(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	h.Set(HeaderSignature, sig)
	return h
}

// During a rotation's grace period the new secret and the old one both
// sign, in that order, and either verifies; what a receiver deduplicates on
// (webhook-id) and the timestamp are signed, so changing either refuses.
func TestSignAndVerifyRotation(t *testing.T) {
	newSecret, oldSecret := mustSecret(t), mustSecret(t)
	body := []byte(`{"type":"alert.created","id":"0193f5a2-7c00-7abc-8def-0123456789ab"}`)
	const id = "0193f5a2-7c00-7abc-8def-0123456789ab"
	at := time.Unix(1764547200, 0)
	h := http.Header{}
	if err := SetHeaders(h, id, at, body, []string{newSecret, oldSecret}, false); err != nil {
		t.Fatal(err)
	}
	sigs := Signatures(h.Get(HeaderSignature))
	if len(sigs) != 2 || h.Get(HeaderID) != id || h.Get(HeaderTimestamp) != "1764547200" {
		t.Fatalf("headers %v", h)
	}
	if one, _ := Sign(id, at, body, newSecret); "v1,"+sigs[0] != one {
		t.Errorf("the first signature is not the new secret's: %q vs %q", sigs[0], one)
	}
	if h.Get(HeaderIdempotency) != "" || h.Get(HeaderLegacySignature) != "" {
		t.Errorf("legacy headers without legacy: %v", h)
	}
	for _, secret := range []string{newSecret, oldSecret} {
		if err := Verify(h, body, secret, at.Add(time.Minute), Tolerance); err != nil {
			t.Errorf("Verify with a signing secret: %v", err)
		}
	}
	with := func(k, v string) http.Header {
		c := h.Clone()
		c.Set(k, v)
		return c
	}
	for _, tt := range []struct {
		name string
		h    http.Header
		body []byte
		sec  string
		now  time.Time
		want error
	}{
		{"another secret", h, body, mustSecret(t), at, ErrSignatureMismatch},
		{"a changed body", h, append(body[:len(body):len(body)], ' '), newSecret, at, ErrSignatureMismatch},
		{"a changed id", with(HeaderID, "0193f5a2-7c00-7abc-8def-0123456789ac"), body, newSecret, at, ErrSignatureMismatch},
		{"a changed timestamp", with(HeaderTimestamp, "1764547260"), body, newSecret, at, ErrSignatureMismatch},
		{"six minutes later", h, body, newSecret, at.Add(6 * time.Minute), ErrStaleTimestamp},
		{"six minutes earlier", h, body, newSecret, at.Add(-6 * time.Minute), ErrStaleTimestamp},
		{"no id", with(HeaderID, ""), body, newSecret, at, ErrMissingHeaders},
		{"a timestamp that is no number", with(HeaderTimestamp, "soon"), body, newSecret, at, ErrBadSignatureHeader},
		{"only other versions", with(HeaderSignature, "v1a,"+sigs[0]+" v2,"+sigs[0]), body, newSecret, at, ErrSignatureMismatch},
		{"a bad secret", h, body, "whsec_short", at, ErrBadSecret},
	} {
		if err := Verify(tt.h, tt.body, tt.sec, tt.now, Tolerance); !errors.Is(err, tt.want) {
			t.Errorf("Verify with %s = %v, want %v", tt.name, err, tt.want)
		}
	}
	// A receiver's library skips what it cannot use and accepts any match.
	mixed := with(HeaderSignature, "v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc= v2,"+sigs[0]+" v1,"+sigs[1])
	if err := Verify(mixed, body, oldSecret, at, Tolerance); err != nil {
		t.Errorf("Verify of a list with foreign entries: %v", err)
	}
	if _, err := Sign("evt.1", at, body, newSecret); !errors.Is(err, ErrBadMessageID) {
		t.Errorf("Sign with a dotted id = %v", err)
	}
}

// While legacy headers are on, the earlier scheme rides along unchanged:
// Idempotency-Key is webhook-id, X-SpeculaPro-Signature the hex HMAC over
// "<t>.<body>" keyed with the whole secret string.
func TestLegacyHeaders(t *testing.T) {
	body := []byte(`{"type":"alert.created","id":"x"}`)
	at := time.Unix(1764547200, 0)
	// printf '%s' '1764547200.{"type":"alert.created","id":"x"}' | openssl dgst -sha256 -hmac whsec_new
	const want = "t=1764547200,v1=a2b8c03eb14a44b103c349f8a529f376b02e37ae39092c84a1801c6802460786"
	if got := SignLegacy(at, body, "whsec_new"); got != want {
		t.Errorf("SignLegacy = %q, want %q", got, want)
	}
	h := http.Header{}
	secret := mustSecret(t)
	if err := SetHeaders(h, "x", at, body, []string{secret}, true); err != nil {
		t.Fatal(err)
	}
	if h.Get(HeaderIdempotency) != "x" || h.Get(HeaderLegacySignature) != SignLegacy(at, body, secret) {
		t.Errorf("legacy headers %v", h)
	}
	if err := Verify(h, body, secret, at, Tolerance); err != nil {
		t.Errorf("the standard signature beside the legacy one: %v", err)
	}
}

// A secret of the earlier form (whsec_ and 64 hex digits) keeps signing:
// hex digits are base64, so the libraries read it as 48 bytes of key.
func TestHexSecretStaysValid(t *testing.T) {
	secret := "whsec_" + strings.Repeat("0123456789abcdef", 4)
	key, err := SigningKey(secret)
	if err != nil || len(key) != 48 {
		t.Fatalf("SigningKey of a hex secret = %d bytes, %v", len(key), err)
	}
	at := time.Unix(1764547200, 0)
	sig, err := Sign("evt_1", at, []byte("{}"), secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := Verify(headers("evt_1", at.Unix(), sig), []byte("{}"), secret, at, Tolerance); err != nil {
		t.Errorf("Verify with a hex secret: %v", err)
	}
	for _, bad := range []string{"", "whsec_", "whsec_new", "whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 16)),
		"whsec_" + base64.StdEncoding.EncodeToString(make([]byte, 65))} {
		if _, err := SigningKey(bad); !errors.Is(err, ErrBadSecret) {
			t.Errorf("SigningKey(%.20q) = %v, want ErrBadSecret", bad, err)
		}
	}
}

func mustSecret(t *testing.T) string {
	t.Helper()
	s, err := NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSecretRoundTrip(t *testing.T) {
	enc, _ := identity.DevKeys()
	keys, err := identity.ParseKeyring(enc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSecret()
	if err != nil || !strings.HasPrefix(s, "whsec_") {
		t.Fatalf("NewSecret = %q, %v", s, err)
	}
	if key, err := SigningKey(s); err != nil || len(key) != secretBytes {
		t.Fatalf("NewSecret's key is %d bytes (%v), want %d", len(key), err, secretBytes)
	}
	ws := event.UUID{1}
	sealed, err := SealSecret(keys, ws, s)
	if err != nil || strings.Contains(string(sealed), s) {
		t.Fatalf("SealSecret = %q, %v", sealed, err)
	}
	if got, err := OpenSecret(keys, ws, sealed); err != nil || got != s {
		t.Fatalf("OpenSecret = %q, %v", got, err)
	}
	if _, err := OpenSecret(keys, event.UUID{2}, sealed); err == nil {
		t.Fatalf("another workspace's OpenSecret opened the secret")
	}
}

// The production client refuses to connect to loopback even when the URL
// passed CheckURL by name (DNS answering with an internal address), does
// not follow redirects, and reads a bounded share of a huge answer.
func TestClientGuardsRedirectsAndBounds(t *testing.T) {
	var hops int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, "/elsewhere", http.StatusFound)
		case "/elsewhere":
			hops++
		case "/huge":
			w.WriteHeader(http.StatusInternalServerError)
			chunk := []byte(strings.Repeat("y", 1<<16))
			for i := 0; i < 16<<4; i++ { // 256 MiB unless the client stops reading
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		}
	}))
	defer srv.Close()

	prod := NewClient(2*time.Second, Policy{})
	_, err := Post(context.Background(), prod, srv.URL+"/x", nil, []byte("{}"))
	if !errors.Is(err, ErrBlockedAddress) {
		t.Fatalf("production client to loopback: %v, want ErrBlockedAddress", err)
	}
	if strings.Contains(err.Error(), srv.URL) {
		t.Errorf("error quotes the URL: %v", err)
	}

	local := NewClient(5*time.Second, Policy{AllowInsecure: true})
	res, err := Post(context.Background(), local, srv.URL+"/redirect", nil, []byte("{}"))
	if !errors.Is(err, ErrRedirect) || res.Status != http.StatusFound || hops != 0 {
		t.Fatalf("redirect: status %d err %v hops %d", res.Status, err, hops)
	}
	start := time.Now()
	res, err = Post(context.Background(), local, srv.URL+"/huge", nil, []byte("{}"))
	if err == nil || res.Status != 500 || len(res.Snippet) > snippetBytes {
		t.Fatalf("huge: status %d snippet %d bytes err %v", res.Status, len(res.Snippet), err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("huge answer took %s: not bounded", d)
	}
}

// The receiver-side shell snippet on docs/worker-webhooks.md ("Verifying a
// delivery") must work as written: run it (bash, base64, od, openssl) on
// deliveries signed here: with the new secret and the old one of a
// rotation, a secret of the hex form, a wrong secret, a tampered body, a
// changed webhook-id and a timestamp beyond the tolerance.
func TestVerificationSnippetOnWebhookPage(t *testing.T) {
	const page = "../../docs/worker-webhooks.md"
	doc, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "<!-- verify-snippet:begin -->\n```sh\n")
	script, _, ok2 := strings.Cut(rest, "```\n<!-- verify-snippet:end -->")
	if !ok || !ok2 {
		t.Fatalf("%s lacks the verify-snippet markers around a ```sh block", page)
	}
	for _, tool := range []string{"openssl", "base64", "od"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is needed to run the page's snippet: %v", tool, err)
		}
	}
	const id = "0193f5a2-7c00-7abc-8def-0123456789ab"
	body := []byte(`{"type":"alert.created","id":"` + id + `","alert":{"title":"Café & <b>"}}`)
	newSecret, oldSecret, wrong := mustSecret(t), mustSecret(t), mustSecret(t)
	hexSecret := "whsec_" + strings.Repeat("5b1e0c9d", 8)
	now := time.Now()
	rotating, err := Sign(id, now, body, newSecret, oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	ofHex, err := Sign(id, now, body, hexSecret)
	if err != nil {
		t.Fatal(err)
	}
	stale, err := Sign(id, now.Add(-6*time.Minute), body, newSecret)
	if err != nil {
		t.Fatal(err)
	}
	run := func(secret, id string, ts time.Time, sig string, body []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "body.json"), body, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SECRET="+secret, "ID="+id, "TS="+strconv.FormatInt(ts.Unix(), 10), "SIG="+sig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("snippet: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		name, secret, id string
		ts               time.Time
		sig              string
		body             []byte
		want             string
	}{
		{"the new secret", newSecret, id, now, rotating, body, "valid"},
		{"the old secret", oldSecret, id, now, rotating, body, "valid"},
		{"a hex secret", hexSecret, id, now, ofHex, body, "valid"},
		{"a wrong secret", wrong, id, now, rotating, body, "invalid"},
		{"a tampered body", newSecret, id, now, rotating, append(body[:len(body):len(body)], '\n'), "invalid"},
		{"a changed id", newSecret, "0193f5a2-7c00-7abc-8def-0123456789ac", now, rotating, body, "invalid"},
		{"a stale timestamp", newSecret, id, now.Add(-6 * time.Minute), stale, body, "invalid"},
	} {
		if got := run(tt.secret, tt.id, tt.ts, tt.sig, tt.body); got != tt.want {
			t.Errorf("snippet with %s printed %q, want %q", tt.name, got, tt.want)
		}
	}
}

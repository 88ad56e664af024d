package webhook

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
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

func TestSignAndVerify(t *testing.T) {
	body := []byte(`{"type":"alert.created","id":"x"}`)
	at := time.Unix(1764547200, 0)
	h := Sign(at, body, "whsec_new", "whsec_old")
	if !strings.HasPrefix(h, "t=1764547200,v1=") || len(Signatures(h)) != 2 {
		t.Fatalf("header %q", h)
	}
	// A fixed vector a receiver can check its own code against:
	// printf '%s' '1764547200.{"type":"alert.created","id":"x"}' | openssl dgst -sha256 -hmac whsec_new
	if want := "t=1764547200,v1=" + mac("whsec_new", "1764547200", body); !strings.HasPrefix(h, want) {
		t.Fatalf("header %q does not start with %q", h, want)
	}
	for _, secret := range []string{"whsec_new", "whsec_old"} {
		if err := Verify(h, body, secret, at.Add(time.Minute), 5*time.Minute); err != nil {
			t.Errorf("Verify with %s: %v", secret, err)
		}
	}
	if err := Verify(h, body, "whsec_other", at, 5*time.Minute); !errors.Is(err, ErrSignatureMismatch) {
		t.Errorf("Verify with another secret = %v", err)
	}
	if err := Verify(h, append(body, ' '), "whsec_new", at, 5*time.Minute); !errors.Is(err, ErrSignatureMismatch) {
		t.Errorf("Verify of a changed body = %v", err)
	}
	if err := Verify(h, body, "whsec_new", at.Add(time.Hour), 5*time.Minute); !errors.Is(err, ErrStaleTimestamp) {
		t.Errorf("Verify an hour later = %v", err)
	}
	if err := Verify("v1=abc", body, "whsec_new", at, 5*time.Minute); !errors.Is(err, ErrBadSignatureHeader) {
		t.Errorf("Verify without t = %v", err)
	}
}

func TestSecretRoundTrip(t *testing.T) {
	enc, _ := identity.DevKeys()
	keys, err := identity.ParseKeyring(enc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSecret()
	if err != nil || !strings.HasPrefix(s, "whsec_") || len(s) != 6+64 {
		t.Fatalf("NewSecret = %q, %v", s, err)
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
// delivery") must work as written: run it (bash, openssl) on a delivery
// signed here, with the right secret, the old secret of a rotation, a wrong
// one, and a tampered body.
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
	if _, err := exec.LookPath("openssl"); err != nil {
		t.Fatalf("openssl is needed to run the page's snippet: %v", err)
	}
	body := []byte(`{"type":"alert.created","id":"0193f5a2-7c00-7abc-8def-0123456789ab","alert":{"title":"Café & <b>"}}`)
	sig := Sign(time.Now(), body, "whsec_new", "whsec_old")
	run := func(secret string, body []byte) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "body.json"), body, 0o644); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "SECRET="+secret, "SIG="+sig)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("snippet: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, tt := range []struct {
		secret string
		body   []byte
		want   string
	}{
		{"whsec_new", body, "valid"},
		{"whsec_old", body, "valid"},
		{"whsec_wrong", body, "invalid"},
		{"whsec_new", append([]byte(nil), append(body, '\n')...), "invalid"},
	} {
		if got := run(tt.secret, tt.body); got != tt.want {
			t.Errorf("snippet with %s on %d bytes printed %q, want %q", tt.secret, len(tt.body), got, tt.want)
		}
	}
}

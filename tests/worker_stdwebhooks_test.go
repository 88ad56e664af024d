package tests

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/speculapro/speculapro/devtools/testenv"
	"github.com/speculapro/speculapro/internal/identity"
	"github.com/speculapro/speculapro/internal/webhook"
)

// Real deliveries from the worker binary, verified by the Standard Webhooks
// library from PyPI (standardwebhooks, which nobody here wrote) in a
// receiver as a customer would write it: every delivery verifies, with a
// new secret and with one of the hex form made before; a retry carries the
// same webhook-id (the event's ID, which is also the body's id); during a
// rotation's grace period the new and the old secret both verify, after it
// only the new one. Then captured deliveries are replayed at the receiver:
// under another webhook-id, with a timestamp pushed back, and as sent six
// minutes ago; the library refuses each.
func TestWorkerDeliveriesVerifyWithStandardWebhooksLibrary(t *testing.T) {
	// Not parallel: a worker's start and the grace period's deliveries must fit in its 10 s.
	s := newWorkerStack(t)
	py := startStdReceiver(t)

	const n = 20
	newID, newSecret := s.addEndpoint(t, py.url("/std/new"))
	hexID, _ := s.addEndpoint(t, py.url("/std/hex"))
	hexSecret := "whsec_" + strings.Repeat("9c4f1e07", 8)
	enc, _ := identity.DevKeys()
	keys, err := identity.ParseKeyring(enc)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := webhook.SealSecret(keys, s.ws, hexSecret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.conn.Exec(t.Context(), `UPDATE speculapro.webhook_endpoints SET secret_encrypted = $1 WHERE id = $2`, sealed, hexID); err != nil {
		t.Fatal(err)
	}
	flakyID, flakySecret := s.addEndpoint(t, py.url("/flaky/std"))
	py.setSecrets(t, map[string][]string{"/std/new": {newSecret}, "/std/hex": {hexSecret}, "/flaky/std": {flakySecret}})

	events := map[string][]string{
		"/std/new":   s.queueDeliveries(t, newID, n),
		"/std/hex":   s.queueDeliveries(t, hexID, n),
		"/flaky/std": s.queueDeliveries(t, flakyID, n/2),
	}
	w := startWorker(t, "worker", s.env)
	for path, ids := range events {
		perID := 1
		if strings.HasPrefix(path, "/flaky/") {
			perID = 2
		}
		got := py.wait(t, path, perID*len(ids))
		byID := map[string]int{}
		for _, r := range got {
			id := r.Headers["webhook-id"]
			byID[id]++
			if !slices.Equal(r.Verdicts, []string{"ok"}) {
				t.Fatalf("%s: the library refused delivery %s: %v (headers %v)", path, id, r.Verdicts, r.Headers)
			}
			if body := jsonOf(r.body(t)); body["id"] != id {
				t.Errorf("%s: webhook-id %s for body id %v", path, id, body["id"])
			}
			// Legacy headers are on by default, for receivers still on the
			// previous scheme; Idempotency-Key is the same ID.
			if r.Headers["idempotency-key"] != id || !strings.HasPrefix(r.Headers["x-speculapro-signature"], "t=") {
				t.Errorf("%s: legacy headers idempotency-key %q, x-speculapro-signature %q", path, r.Headers["idempotency-key"], r.Headers["x-speculapro-signature"])
			}
		}
		for _, id := range ids {
			if byID[id] != perID {
				t.Fatalf("%s: event %s arrived under its webhook-id %d times, want %d", path, id, byID[id], perID)
			}
		}
	}
	s.waitDone(t, waitBound)
	w.stop(t)
	if key, err := webhook.SigningKey(newSecret); err != nil || len(key) != 32 {
		t.Errorf("webhook add made a secret of %d bytes of key (%v), want whsec_ and the base64 of 32", len(key), err)
	}

	// Rotation, with the legacy headers off: the new secret and the old one
	// both verify during the grace period; after it only the new one does.
	const grace = 10 * time.Second
	out := s.cli(t, s.env, "rotate-secret", "--workspace", s.ws.String(), "--endpoint", newID.String(), "--grace", grace.String())
	rotated := out["secret"]
	if _, err := webhook.SigningKey(rotated); err != nil || rotated == newSecret {
		t.Fatalf("rotate-secret printed %v (%v)", out, err)
	}
	validUntil, err := time.Parse(time.RFC3339, out["previous_secret_valid_until"])
	if err != nil {
		t.Fatalf("rotate-secret printed %v: %v", out, err)
	}
	py.setSecrets(t, map[string][]string{"/std/new": {rotated, newSecret}})
	w = startWorker(t, "worker", s.with(map[string]string{"SP_WEBHOOK_LEGACY_HEADERS": "false"}))
	s.queueDeliveries(t, newID, n/2)
	during := py.wait(t, "/std/new", n+n/2)[n:]
	for _, r := range during {
		if at := time.Unix(0, int64(r.At*1e9)); !at.Before(validUntil) {
			t.Fatalf("a grace-period delivery arrived at %s, after the grace period (%s): make the grace longer", at, validUntil)
		}
		if !slices.Equal(r.Verdicts, []string{"ok", "ok"}) || len(strings.Fields(r.Headers["webhook-signature"])) != 2 {
			t.Fatalf("during the grace period: verdicts %v for webhook-signature %q, want both secrets to verify", r.Verdicts, r.Headers["webhook-signature"])
		}
		if r.Headers["idempotency-key"] != "" || r.Headers["x-speculapro-signature"] != "" {
			t.Fatalf("legacy headers sent with SP_WEBHOOK_LEGACY_HEADERS=false: %v", r.Headers)
		}
	}
	s.waitDone(t, waitBound)
	time.Sleep(time.Until(validUntil) + time.Second)
	s.queueDeliveries(t, newID, n/2)
	after := py.wait(t, "/std/new", 2*n)[n+n/2:]
	for _, r := range after {
		if len(r.Verdicts) != 2 || r.Verdicts[0] != "ok" || !strings.Contains(r.Verdicts[1], "No matching signature") {
			t.Fatalf("after the grace period: verdicts %v, want the new secret to verify and the old one refused", r.Verdicts)
		}
	}
	s.waitDone(t, waitBound)
	w.stop(t)

	// Replays of a captured delivery, sent to a receiver holding the
	// endpoint's secret.
	py.setSecrets(t, map[string][]string{"/replay": {newSecret}})
	capture := py.records("/std/new")[0]
	id := capture.Headers["webhook-id"]
	sixMinutesAgo := time.Now().Add(-6 * time.Minute)
	signedThen, err := webhook.Sign(id, sixMinutesAgo, capture.body(t), newSecret)
	if err != nil {
		t.Fatal(err)
	}
	otherID := events["/std/new"][0] // another event of the same endpoint
	if otherID == id {
		otherID = events["/std/new"][1]
	}
	for _, c := range []struct {
		name   string
		change map[string]string
		want   string
	}{
		{"as captured", nil, "ok"},
		{"under another webhook-id", map[string]string{"webhook-id": otherID, "idempotency-key": otherID}, "refused: No matching signature found"},
		{"with webhook-timestamp pushed back six minutes", map[string]string{"webhook-timestamp": fmt.Sprint(sixMinutesAgo.Unix())}, "refused: Message timestamp too old"},
		{"as sent six minutes ago", map[string]string{"webhook-timestamp": fmt.Sprint(sixMinutesAgo.Unix()), "webhook-signature": signedThen}, "refused: Message timestamp too old"},
	} {
		h := map[string]string{}
		for k, v := range capture.Headers {
			h[k] = v
		}
		for k, v := range c.change {
			h[k] = v
		}
		status := py.post(t, "/replay", h, capture.body(t))
		got := py.records("/replay")
		if v := got[len(got)-1].Verdicts; !slices.Equal(v, []string{c.want}) || (c.want == "ok") != (status == http.StatusOK) {
			t.Errorf("replay %s: verdicts %v, status %d; want %q", c.name, v, status, c.want)
		}
	}
}

// stdReceiver is tests/testdata/stdwebhooks_receiver.py running in the
// venv deploy/local/stack.sh makes (.cache/pyvenv, standardwebhooks).
type stdReceiver struct {
	addr    string
	secrets string // the JSON file of secrets per path
	log     string // the JSON lines of what arrived
}

// stdRecord is one request the receiver got and its verdicts.
type stdRecord struct {
	Path     string            `json:"path"`
	Headers  map[string]string `json:"headers"`
	Body     string            `json:"body"` // base64
	Verdicts []string          `json:"verdicts"`
	Status   int               `json:"status"`
	At       float64           `json:"at"` // Unix seconds
}

func (r stdRecord) body(t testing.TB) []byte {
	b, err := base64.StdEncoding.DecodeString(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func startStdReceiver(t testing.TB) *stdReceiver {
	t.Helper()
	root := testenv.RepoRoot(t)
	python := filepath.Join(root, ".cache", "pyvenv", "bin", "python")
	if err := exec.Command(python, "-c", "import standardwebhooks").Run(); err != nil {
		testenv.Unavailable(t, fmt.Sprintf("the standardwebhooks library NOT AVAILABLE in %s (%v); `bash deploy/local/stack.sh up` installs it.", python, err))
	}
	dir := t.TempDir()
	r := &stdReceiver{secrets: filepath.Join(dir, "secrets.json"), log: filepath.Join(dir, "received.jsonl")}
	r.setSecrets(t, nil)
	cmd := exec.Command(python, filepath.Join(root, "tests", "testdata", "stdwebhooks_receiver.py"), r.secrets, r.log)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting the Python receiver: %v", err)
	}
	exited := make(chan struct{})
	// The waiter owns cmd.Wait and ends with the process, which cleanup
	// kills.
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		if t.Failed() && stderr.Len() > 0 {
			t.Logf("Python receiver stderr:\n%s", stderr.String())
		}
	})
	first := make(chan string, 1)
	// Reads the one line the receiver prints; ends with its stdout.
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		first <- line
	}()
	select {
	case line := <-first:
		addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening ")
		if !ok {
			t.Fatalf("the Python receiver printed %q\n%s", line, stderr.String())
		}
		r.addr = addr
	case <-time.After(30 * time.Second):
		t.Fatalf("the Python receiver did not start within 30 s\n%s", stderr.String())
	}
	return r
}

func (r *stdReceiver) url(path string) string { return "http://" + r.addr + path }

// setSecrets replaces the secrets file whole (the receiver reads it per
// request).
func (r *stdReceiver) setSecrets(t testing.TB, secrets map[string][]string) {
	t.Helper()
	b, err := json.Marshal(secrets)
	if err != nil {
		t.Fatal(err)
	}
	tmp := r.secrets + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, r.secrets); err != nil {
		t.Fatal(err)
	}
}

// records returns what arrived at path, in order of arrival (whole lines
// only: one being written is left for the next call).
func (r *stdReceiver) records(path string) []stdRecord {
	b, _ := os.ReadFile(r.log)
	var out []stdRecord
	for _, line := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		var rec stdRecord
		if json.Unmarshal([]byte(line), &rec) == nil && rec.Path == path {
			out = append(out, rec)
		}
	}
	return out
}

// wait returns the records of path once there are at least n.
func (r *stdReceiver) wait(t testing.TB, path string, n int) []stdRecord {
	t.Helper()
	var got []stdRecord
	waitUntil(t, waitBound, fmt.Sprintf("%d requests at %s", n, path), func() error {
		if got = r.records(path); len(got) < n {
			return fmt.Errorf("%d arrived", len(got))
		}
		return nil
	})
	return got
}

// post sends body with headers to path, as a replaying attacker would, and
// returns the status.
func (r *stdReceiver) post(t testing.TB, path string, headers map[string]string, body []byte) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, r.url(path), bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		switch k {
		case "content-length", "host", "connection", "accept-encoding":
		default:
			req.Header.Set(k, v)
		}
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("replaying to %s: %v", path, err)
	}
	res.Body.Close()
	return res.StatusCode
}

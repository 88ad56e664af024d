package tests

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/speculapro/speculapro/internal/dbmigrate/dbtest"
	"github.com/speculapro/speculapro/internal/event"
	"github.com/speculapro/speculapro/internal/identity"
)

// workerStack is one worker test's database and workspace, with the
// environment its workers and `speculapro webhook` commands get.
type workerStack struct {
	db   *dbtest.DB
	conn *pgx.Conn // superuser, for setting up and checking
	ws   event.UUID
	env  map[string]string
}

// newWorkerStack is a fresh migrated database with one workspace; env is
// the local-stack mode (http:// and loopback allowed), short backoffs.
func newWorkerStack(t testing.TB) *workerStack {
	t.Helper()
	return workerStackOn(t, dbtest.New(t))
}

// workerStackOn is newWorkerStack on a database the test made itself (on a
// private server, say).
func workerStackOn(t testing.TB, db *dbtest.DB) *workerStack {
	t.Helper()
	s := &workerStack{db: db, conn: db.Connect(t, db.SuperuserURL)}
	if err := s.conn.QueryRow(context.Background(),
		"INSERT INTO speculapro.workspaces (name) VALUES ('worker e2e') RETURNING id").Scan(&s.ws); err != nil {
		t.Fatalf("creating workspace: %v", err)
	}
	enc, _ := identity.DevKeys()
	s.env = map[string]string{
		"SP_DB_URL":                  db.AppURL,
		"SP_DB_SYSTEM_URL":           db.SystemURL,
		"SP_ENCRYPTION_KEY":          enc,
		"SP_WEBHOOK_ALLOW_INSECURE":  "true",
		"SP_WEBHOOK_BACKOFF_INITIAL": "1s",
		"SP_WEBHOOK_BACKOFF_MAX":     "4s",
		"SP_WEBHOOK_TIMEOUT":         "5s",
		"SP_WORKER_LEASE":            "15s",
		// As many at once to one endpoint as a worker sends: the tests of
		// delivery, crashes and throughput load a single endpoint; the
		// per-endpoint limit has its own test.
		"SP_WEBHOOK_ENDPOINT_CONCURRENCY":  "400",
		"SP_WEBHOOK_WORKSPACE_CONCURRENCY": "1600",
	}
	return s
}

// with is the stack's environment with extra settings on top (an empty
// value removes a setting).
func (s *workerStack) with(extra map[string]string) map[string]string {
	env := map[string]string{}
	for k, v := range s.env {
		env[k] = v
	}
	for k, v := range extra {
		if v == "" {
			delete(env, k)
		} else {
			env[k] = v
		}
	}
	return env
}

// cli runs `speculapro webhook args…` and returns its key=value output.
func (s *workerStack) cli(t testing.TB, env map[string]string, args ...string) map[string]string {
	t.Helper()
	stdout, stderr, code := runBin(t, env, append([]string{"webhook"}, args...)...)
	if code != 0 {
		t.Fatalf("speculapro webhook %s: exit %d\n%s%s", strings.Join(args, " "), code, stdout, stderr)
	}
	out := map[string]string{}
	for _, line := range strings.Split(stdout, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			out[k] = v
		}
	}
	return out
}

// addEndpoint registers url through the CLI and returns its id and secret.
func (s *workerStack) addEndpoint(t testing.TB, url string) (event.UUID, string) {
	t.Helper()
	out := s.cli(t, s.env, "add", "--workspace", s.ws.String(), "--url", url, "--events", "alert.created,decision.created")
	id, err := event.ParseUUID(out["endpoint_id"])
	if err != nil || !strings.HasPrefix(out["secret"], "whsec_") {
		t.Fatalf("webhook add printed %v", out)
	}
	return id, out["secret"]
}

// queueDeliveries queues n alert.created deliveries to endpoint the way the
// stream's pg_rule_hits does (an alert's id as event id, its payload), and
// returns the event ids.
func (s *workerStack) queueDeliveries(t testing.TB, endpoint event.UUID, n int) []string {
	t.Helper()
	rows, err := s.conn.Query(context.Background(), `
INSERT INTO speculapro.webhook_deliveries (workspace_id, endpoint_id, event_type, event_id, payload)
SELECT $1, $2, 'alert.created', a.id,
       jsonb_build_object('type', 'alert.created', 'id', a.id, 'workspace_id', $1::uuid, 'created_at', now(),
                          'alert', jsonb_build_object('id', a.id, 'severity', 'high', 'title', 'Large transfer to a new payee',
                                                      'details', jsonb_build_object('n', a.g)))
  FROM (SELECT g, gen_random_uuid() AS id FROM generate_series(1, $3) g) a
RETURNING event_id::text`, s.ws, endpoint, n)
	if err != nil {
		t.Fatalf("queueing %d deliveries: %v", n, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("queueing %d deliveries: %v", n, err)
	}
	return ids
}

// count runs a count query.
func (s *workerStack) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	if err := s.conn.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

// waitDone waits until no delivery of an enabled endpoint and no
// notification is pending (bounded by within).
func (s *workerStack) waitDone(t testing.TB, within time.Duration) {
	t.Helper()
	waitUntil(t, within, "every delivery settled", func() error {
		if n := s.count(t, "SELECT count(*) FROM speculapro.webhook_deliveries d JOIN speculapro.webhook_endpoints e ON e.id = d.endpoint_id AND e.enabled WHERE d.status = 'pending'") +
			s.count(t, "SELECT count(*) FROM speculapro.notifications WHERE status = 'pending'"); n > 0 {
			return fmt.Errorf("%d rows still pending", n)
		}
		return nil
	})
}

// startWorker runs pipelines/worker.yaml.
func startWorker(t testing.TB, name string, env map[string]string) *binProcess {
	t.Helper()
	p := newBinProcess(t).named(name)
	return p.start(t, env, p.runArgs("pipelines/worker.yaml")...)
}

// received is one request a receiver got.
type received struct {
	path     string
	key      string // webhook-id (a notification's Idempotency-Key)
	delivery string
	event    string
	header   http.Header
	body     []byte
	at       time.Time
}

// receiver is a real HTTP server on loopback that records every request.
// The path decides how it answers: /flaky/… answers 500 to a key's first
// two requests, /slow/… waits two seconds, /delay/… waits the receiver's
// delay, /redirect/… answers 302, /huge/… streams a body of hugeBytes,
// /gone/… answers 410, /error/… 500 always, anything else 200.
type receiver struct {
	addr      string
	delay     time.Duration
	mu        sync.Mutex
	got       []received
	perKey    map[string]int
	hugeSent  int64
	hugeBytes int64
}

func newReceiver(t testing.TB) *receiver {
	t.Helper()
	r := &receiver{perKey: map[string]int{}, hugeBytes: 1 << 30}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.addr = l.Addr().String()
	srv := &http.Server{Handler: r, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(l)
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

func (r *receiver) url(path string) string { return "http://" + r.addr + path }

func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	key := req.Header.Get("webhook-id")
	if key == "" {
		key = req.Header.Get("Idempotency-Key")
	}
	rec := received{path: req.URL.Path, key: key, delivery: req.Header.Get("X-SpeculaPro-Delivery"),
		event: req.Header.Get("X-SpeculaPro-Event"), header: req.Header.Clone(), body: body, at: time.Now()}
	r.mu.Lock()
	r.got = append(r.got, rec)
	r.perKey[rec.path+" "+rec.key]++
	n := r.perKey[rec.path+" "+rec.key]
	r.mu.Unlock()
	switch first, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/"); first {
	case "flaky":
		if n <= 2 {
			http.Error(w, "temporarily broken", http.StatusInternalServerError)
			return
		}
	case "slow":
		time.Sleep(2 * time.Second)
	case "delay":
		time.Sleep(r.delay)
	case "redirect":
		http.Redirect(w, req, "/landing", http.StatusFound)
		return
	case "gone":
		http.Error(w, "gone", http.StatusGone)
		return
	case "error":
		http.Error(w, "always broken", http.StatusInternalServerError)
		return
	case "huge":
		w.WriteHeader(http.StatusOK)
		chunk := []byte(strings.Repeat("x", 64<<10))
		var sent int64
		for sent < r.hugeBytes {
			k, err := w.Write(chunk)
			sent += int64(k)
			if err != nil {
				break
			}
		}
		r.mu.Lock()
		r.hugeSent += sent
		r.mu.Unlock()
		return
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{"ok":true}`))
}

// requests returns what arrived under path prefix.
func (r *receiver) requests(prefix string) []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []received
	for _, g := range r.got {
		if strings.HasPrefix(g.path, prefix) {
			out = append(out, g)
		}
	}
	return out
}

// smtpServer is a real SMTP server on loopback, small but by the protocol:
// EHLO, STARTTLS with a self-signed certificate (its PEM in caFile, which
// the worker is told to trust), AUTH PLAIN, MAIL, RCPT, DATA, QUIT. It
// refuses MAIL before STARTTLS, so a mail that arrives went over TLS.
type smtpServer struct {
	addr   string
	caFile string
	mu     sync.Mutex
	mails  []smtpMail
}

type smtpMail struct {
	from, to string
	auth     string
	tls      bool
	data     string
}

func newSMTPServer(t testing.TB) *smtpServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	s := &smtpServer{caFile: filepath.Join(t.TempDir(), "smtp-ca.pem")}
	if err := os.WriteFile(s.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.addr = l.Addr().String()
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go s.serve(c, cfg)
		}
	}()
	return s
}

func (s *smtpServer) url(user, pass string) string {
	return fmt.Sprintf("smtp://%s:%s@%s?from=alerts@speculapro.test&ca_file=%s", user, pass, s.addr, s.caFile)
}

func (s *smtpServer) serve(c net.Conn, cfg *tls.Config) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	var m smtpMail
	rw := newLineConn(c)
	rw.reply("220 test-smtp ESMTP")
	for {
		line, err := rw.line()
		if err != nil {
			return
		}
		verb := strings.ToUpper(strings.SplitN(line, " ", 2)[0])
		switch verb {
		case "EHLO", "HELO":
			if m.tls {
				rw.reply("250-test-smtp", "250-AUTH PLAIN", "250 8BITMIME")
			} else {
				rw.reply("250-test-smtp", "250-STARTTLS", "250 8BITMIME")
			}
		case "STARTTLS":
			rw.reply("220 go ahead")
			tc := tls.Server(c, cfg)
			if err := tc.Handshake(); err != nil {
				return
			}
			c, m.tls = tc, true
			rw = newLineConn(tc)
		case "AUTH":
			m.auth = line
			rw.reply("235 ok")
		case "MAIL":
			if !m.tls {
				rw.reply("530 STARTTLS first")
				continue
			}
			m.from = line
			rw.reply("250 ok")
		case "RCPT":
			m.to = line
			rw.reply("250 ok")
		case "DATA":
			rw.reply("354 go on")
			var b strings.Builder
			for {
				l, err := rw.line()
				if err != nil {
					return
				}
				if l == "." {
					break
				}
				b.WriteString(strings.TrimPrefix(l, ".") + "\n")
			}
			m.data = b.String()
			s.mu.Lock()
			s.mails = append(s.mails, m)
			s.mu.Unlock()
			m = smtpMail{tls: m.tls}
			rw.reply("250 queued")
		case "RSET", "NOOP":
			rw.reply("250 ok")
		case "QUIT":
			rw.reply("221 bye")
			return
		default:
			rw.reply("502 unknown")
		}
	}
}

func (s *smtpServer) received() []smtpMail {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]smtpMail(nil), s.mails...)
}

// lineConn reads CRLF lines and writes replies.
type lineConn struct {
	c   net.Conn
	buf []byte
}

func newLineConn(c net.Conn) *lineConn { return &lineConn{c: c} }

func (l *lineConn) line() (string, error) {
	for {
		if i := strings.Index(string(l.buf), "\r\n"); i >= 0 {
			s := string(l.buf[:i])
			l.buf = l.buf[i+2:]
			return s, nil
		}
		chunk := make([]byte, 4096)
		n, err := l.c.Read(chunk)
		if n > 0 {
			l.buf = append(l.buf, chunk[:n]...)
		}
		if err != nil {
			return "", err
		}
	}
}

func (l *lineConn) reply(lines ...string) {
	_, _ = l.c.Write([]byte(strings.Join(lines, "\r\n") + "\r\n"))
}

// jsonOf decodes a body for a failure message.
func jsonOf(b []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

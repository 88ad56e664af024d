package outboxsend

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"mime"
	"net"
	"net/mail"
	"net/smtp"
	"net/url"
	"os"
	"strings"
	"time"
)

// smtpConfig is SP_SMTP_URL parsed.
type smtpConfig struct {
	addr     string // host:port
	host     string // for TLS and AUTH
	user     string
	pass     string
	from     string
	rootCAs  *x509.CertPool // nil: the system's
	hasCreds bool
}

// parseSMTPURL reads smtp://[user:pass@]host[:port]?from=…[&ca_file=…].
// Errors never quote the URL (it carries a password).
func parseSMTPURL(raw string) (*smtpConfig, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme != "smtp" || u.Hostname() == "" {
		return nil, errors.New("want smtp://[user:pass@]host[:port]?from=address (STARTTLS is always required)")
	}
	c := &smtpConfig{host: u.Hostname()}
	port := u.Port()
	if port == "" {
		port = "587"
	}
	c.addr = net.JoinHostPort(c.host, port)
	if u.User != nil {
		c.user = u.User.Username()
		c.pass, _ = u.User.Password()
		c.hasCreds = c.user != ""
	}
	q := u.Query()
	from, err := mail.ParseAddress(q.Get("from"))
	if err != nil {
		return nil, errors.New("the from parameter must be a mail address (…?from=alerts@example.com)")
	}
	c.from = from.Address
	if f := q.Get("ca_file"); f != "" {
		pem, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("reading ca_file: %w", err)
		}
		c.rootCAs = x509.NewCertPool()
		if !c.rootCAs.AppendCertsFromPEM(pem) {
			return nil, errors.New("ca_file holds no PEM certificate")
		}
	}
	return c, nil
}

// send mails j's summary to its recipient: connect, EHLO, STARTTLS (refused
// when not offered), AUTH PLAIN when the URL has credentials, one message.
// ctx's deadline bounds the whole exchange.
func (c *smtpConfig) send(ctx context.Context, j *job) error {
	to, err := mail.ParseAddress(j.recipient)
	if err != nil {
		return fmt.Errorf("the recipient is not a mail address: %w", errPermanent)
	}
	s := summaryOf(j)
	msg := c.message(to.Address, j.id.String(), s)

	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", c.addr)
	if err != nil {
		return fmt.Errorf("connecting to the mail server: %w", err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	cl, err := smtp.NewClient(conn, c.host)
	if err != nil {
		return fmt.Errorf("mail server greeting: %w", err)
	}
	defer cl.Close()
	if err := cl.Hello("speculapro"); err != nil {
		return fmt.Errorf("mail server EHLO: %w", err)
	}
	if ok, _ := cl.Extension("STARTTLS"); !ok {
		return errors.New("the mail server does not offer STARTTLS, which is required")
	}
	if err := cl.StartTLS(&tls.Config{ServerName: c.host, RootCAs: c.rootCAs, MinVersion: tls.VersionTLS12}); err != nil {
		return fmt.Errorf("mail server STARTTLS: %w", err)
	}
	if c.hasCreds {
		if err := cl.Auth(smtp.PlainAuth("", c.user, c.pass, c.host)); err != nil {
			return fmt.Errorf("mail server AUTH: %w", err)
		}
	}
	if err := cl.Mail(c.from); err != nil {
		return fmt.Errorf("mail server MAIL FROM: %w", err)
	}
	if err := cl.Rcpt(to.Address); err != nil {
		return fmt.Errorf("mail server RCPT TO: %w", err)
	}
	w, err := cl.Data()
	if err != nil {
		return fmt.Errorf("mail server DATA: %w", err)
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("sending the mail: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("mail server refused the message: %w", err)
	}
	_ = cl.Quit()
	return nil
}

// message is the RFC 5322 text of a notification mail.
func (c *smtpConfig) message(to, notificationID string, s summary) []byte {
	var b strings.Builder
	h := func(k, v string) { fmt.Fprintf(&b, "%s: %s\r\n", k, v) }
	h("From", c.from)
	h("To", to)
	h("Subject", mime.QEncoding.Encode("utf-8", s.subject()))
	h("Date", time.Now().UTC().Format(time.RFC1123Z))
	h("Message-ID", "<"+notificationID+"@speculapro>")
	h("MIME-Version", "1.0")
	h("Content-Type", "text/plain; charset=utf-8")
	h("Content-Transfer-Encoding", "8bit")
	b.WriteString("\r\n")
	b.WriteString(strings.ReplaceAll(s.text(notificationID), "\n", "\r\n"))
	return []byte(b.String())
}

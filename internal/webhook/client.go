package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds of what is read back from a receiver: the start of the body goes
// into last_error, a little more is drained so the connection can be reused,
// and nothing beyond: a huge or endless answer costs the worker nothing.
const (
	snippetBytes = 512
	drainBytes   = 64 << 10
)

// ErrRedirect: the receiver answered 3xx; redirects are never followed (a
// webhook URL must not become a way into the internal network).
var ErrRedirect = errors.New("the endpoint answered with a redirect, which is not followed: register the final URL")

// NewClient is the HTTP client deliveries use: timeout bounds a whole
// attempt (connecting, sending, the answer's head); redirects are returned,
// not followed; no proxy from the environment; TLS 1.2 or newer; and every
// connection's resolved address must pass targets.CheckAddr.
func NewClient(timeout time.Duration, targets Policy) *http.Client {
	tr := &http.Transport{
		Proxy:                 nil,
		DialContext:           targets.dialer(),
		TLSClientConfig:       &tls.Config{MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   512,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   timeout,
		ResponseHeaderTimeout: timeout,
	}
	return &http.Client{
		Transport:     tr,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// Result is the outcome of one POST.
type Result struct {
	Status  int    // the HTTP status, 0 when none came back
	Snippet string // the start of the answer's body, for last_error
}

// Post sends body to url with headers and reads back at most a small bound
// of the answer. err is nil only for a 2xx; a 3xx wraps ErrRedirect. The
// error never quotes the URL.
func Post(ctx context.Context, client *http.Client, target string, headers http.Header, body []byte) (Result, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return Result{}, fmt.Errorf("building the request: %w", ErrNotAURL)
	}
	for k, v := range headers {
		req.Header[k] = v
	}
	resp, err := client.Do(req)
	if err != nil {
		return Result{}, fmt.Errorf("sending: %w", scrubURL(err))
	}
	defer resp.Body.Close()
	head, _ := io.ReadAll(io.LimitReader(resp.Body, snippetBytes))
	_, _ = io.CopyN(io.Discard, resp.Body, drainBytes)
	res := Result{Status: resp.StatusCode, Snippet: printable(head)}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		return res, nil
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return res, fmt.Errorf("HTTP %d: %w", resp.StatusCode, ErrRedirect)
	default:
		return res, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
}

// scrubURL drops the URL net/http puts in its errors (it may carry a
// token), keeping what failed.
func scrubURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// printable is b as valid UTF-8 on one line.
func printable(b []byte) string {
	s := strings.ToValidUTF8(string(b), "\uFFFD")
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return ' '
		}
		return r
	}, s)
	for len(s) > 0 && !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return strings.TrimSpace(s)
}

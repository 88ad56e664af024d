package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
)

// Errors a caller may classify with errors.Is.
var (
	// ErrNotAURL: the text is not an absolute http(s) URL with a host.
	ErrNotAURL = errors.New("not an absolute http:// or https:// URL with a host")
	// ErrInsecureURL: http:// outside the insecure (local) mode.
	ErrInsecureURL = errors.New("only https:// webhook URLs are allowed (SP_WEBHOOK_ALLOW_INSECURE=true allows http:// on local stacks)")
	// ErrBlockedAddress: the host is or resolves to a loopback, private,
	// link-local or otherwise internal address outside the insecure mode.
	ErrBlockedAddress = errors.New("the address is loopback, private, link-local or unspecified, which webhooks may not reach (SP_WEBHOOK_ALLOW_INSECURE=true allows it on local stacks)")
)

// maxURLLength bounds a stored URL.
const maxURLLength = 2048

// CheckURL reports whether raw may receive deliveries: an absolute URL with
// a host, no user info, https:// unless allowInsecure, and (unless
// allowInsecure) a host that is not a literal internal address. A host name
// is checked again, resolved, on every connection (NewClient's guard), so a
// name that resolves inside the network is refused when sending too. The
// error never quotes the URL: it may carry a token.
func CheckURL(raw string, allowInsecure bool) error {
	if len(raw) > maxURLLength {
		return fmt.Errorf("webhook URL: %w (longer than %d bytes)", ErrNotAURL, maxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return fmt.Errorf("webhook URL: %w", ErrNotAURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !allowInsecure {
			return fmt.Errorf("webhook URL: %w", ErrInsecureURL)
		}
	default:
		return fmt.Errorf("webhook URL: %w (scheme %q)", ErrNotAURL, u.Scheme)
	}
	if u.User != nil {
		return fmt.Errorf("webhook URL: %w (user info is not allowed; put a token in the path or query)", ErrNotAURL)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("webhook URL: %w", ErrNotAURL)
	}
	if allowInsecure {
		return nil
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return fmt.Errorf("webhook URL: %w (localhost)", ErrBlockedAddress)
	}
	if ip, err := netip.ParseAddr(host); err == nil && blocked(ip) {
		return fmt.Errorf("webhook URL: %w (%s)", ErrBlockedAddress, ip)
	}
	return nil
}

// blocked reports whether ip is one webhooks must not reach in production.
func blocked(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() ||
		cgnat.Contains(ip) || !ip.IsValid()
}

// cgnat is the shared address space (RFC 6598), internal to carriers.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// guardControl is a net.Dialer Control that refuses to connect to a blocked
// address: it runs after name resolution, on the address actually dialled,
// so DNS that answers with an internal address (rebinding) is refused too.
func guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook connection to an unparsable address: %w", ErrBlockedAddress)
	}
	if blocked(ap.Addr()) {
		return fmt.Errorf("webhook connection to %s: %w", ap.Addr(), ErrBlockedAddress)
	}
	return nil
}

// dialContext returns the dialer a client uses.
func dialer(allowInsecure bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{}
	if !allowInsecure {
		d.Control = guardControl
	}
	return d.DialContext
}

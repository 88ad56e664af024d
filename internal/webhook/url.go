package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/net/idna"
)

// Errors a caller may classify with errors.Is.
var (
	// ErrNotAURL: the text is not an absolute http(s) URL with a host.
	ErrNotAURL = errors.New("not an absolute http:// or https:// URL with a host")
	// ErrInsecureURL: http:// outside the insecure (local) mode.
	ErrInsecureURL = errors.New("only https:// webhook URLs are allowed (SP_WEBHOOK_ALLOW_INSECURE=true allows http:// on local stacks)")
	// ErrBlockedAddress: the host is, resolves to or disguises an address
	// the policy does not open (Policy.CheckAddr); the error wrapping it
	// names the address and its special-purpose block.
	ErrBlockedAddress = errors.New("webhooks reach only public (global unicast) addresses")
)

// maxURLLength bounds a stored URL.
const maxURLLength = 2048

// Policy is which targets webhooks may reach. The zero Policy is
// production's: https:// to global unicast addresses only.
type Policy struct {
	// AllowInsecure (SP_WEBHOOK_ALLOW_INSECURE, local stacks and tests)
	// allows http:// and loopback; never private or link-local ranges.
	AllowInsecure bool
	// PrivateNetworks (SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS) are the
	// non-public ranges an installation delivers into; loopback stays
	// AllowInsecure's alone.
	PrivateNetworks []netip.Prefix
}

// NewPolicy is the Policy of the two settings, privateNetworks as
// ParsePrivateNetworks reads it.
func NewPolicy(allowInsecure bool, privateNetworks string) (Policy, error) {
	nets, err := ParsePrivateNetworks(privateNetworks)
	if err != nil {
		return Policy{}, err
	}
	return Policy{AllowInsecure: allowInsecure, PrivateNetworks: nets}, nil
}

// CheckURL reports, without any I/O, whether raw may receive deliveries: an
// absolute URL with a host, no user info, https:// unless AllowInsecure, and
// a host that is not written to disguise an address: a literal address must
// pass CheckAddr, a localhost name is loopback, and a numeric host that is
// not a dotted-decimal IPv4 address (2130706433, 0x7f.1, 127.1, 0, a
// trailing dot) is refused, since resolvers read such forms differently. The
// host is first mapped as net/http maps it before dialling (IDNA, so
// full-width digits are digits). A host name is resolved by
// CheckRegistration, and checked again on every connection (NewClient's
// guard). The error never quotes the URL: it may carry a token.
func (p Policy) CheckURL(raw string) error {
	_, err := p.checkURL(raw)
	return err
}

// checkURL is CheckURL returning the host name to resolve ("" for a literal
// address).
func (p Policy) checkURL(raw string) (string, error) {
	if len(raw) > maxURLLength {
		return "", fmt.Errorf("webhook URL: %w (longer than %d bytes)", ErrNotAURL, maxURLLength)
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("webhook URL: %w", ErrNotAURL)
	}
	switch u.Scheme {
	case "https":
	case "http":
		if !p.AllowInsecure {
			return "", fmt.Errorf("webhook URL: %w", ErrInsecureURL)
		}
	default:
		return "", fmt.Errorf("webhook URL: %w (scheme %q)", ErrNotAURL, u.Scheme)
	}
	if u.User != nil {
		return "", fmt.Errorf("webhook URL: %w (user info is not allowed; put a token in the path or query)", ErrNotAURL)
	}
	host := u.Hostname()
	if host == "" {
		return "", fmt.Errorf("webhook URL: %w", ErrNotAURL)
	}
	if strings.HasPrefix(u.Host, "[") {
		ip, err := netip.ParseAddr(host)
		if err != nil || !ip.Is6() {
			return "", fmt.Errorf("webhook URL: %w (the bracketed host is not an IPv6 address)", ErrNotAURL)
		}
		if ip.Zone() != "" {
			return "", fmt.Errorf("webhook URL: %w (an IPv6 zone names an interface of this machine)", ErrNotAURL)
		}
		if err := p.CheckAddr(ip); err != nil {
			return "", fmt.Errorf("webhook URL: %w", err)
		}
		return "", nil
	}
	name := host
	if !isASCII(host) {
		// What net/http does before dialling: an ASCII host as it is,
		// any other mapped for lookup (full-width digits become digits).
		if name, err = idna.Lookup.ToASCII(host); err != nil {
			return "", fmt.Errorf("webhook URL: %w (the host is not a valid name: %v)", ErrNotAURL, err)
		}
	}
	name = strings.ToLower(name)
	bare := strings.TrimSuffix(name, ".")
	if bare == "" || strings.Contains(bare, "..") || strings.HasPrefix(bare, ".") {
		return "", fmt.Errorf("webhook URL: %w (the host has an empty label)", ErrNotAURL)
	}
	if endsInNumber(bare) {
		ip, err := netip.ParseAddr(name)
		if err != nil || !ip.Is4() || ip.String() != host {
			return "", p.numericHost(bare)
		}
		if err := p.CheckAddr(ip); err != nil {
			return "", fmt.Errorf("webhook URL: %w", err)
		}
		return "", nil
	}
	if bare == "localhost" || strings.HasSuffix(bare, ".localhost") {
		if !p.AllowInsecure {
			return "", fmt.Errorf("webhook URL: %w", &refusal{subject: "a localhost name", why: "loopback (RFC 6761)", hint: hintLoopback})
		}
	}
	return name, nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// endsInNumber reports whether a host's last label is a number (decimal,
// or hex with 0x), which makes the whole host an IPv4 address to browsers
// and to inet_aton, never a DNS name (RFC 3696: a top-level label is not
// all-numeric).
func endsInNumber(host string) bool {
	last := host[strings.LastIndexByte(host, '.')+1:]
	if last == "" {
		return false
	}
	if rest, ok := strings.CutPrefix(last, "0x"); ok {
		_, err := strconv.ParseUint("0"+rest, 16, 64)
		return err == nil
	}
	_, err := strconv.ParseUint(last, 10, 64)
	return err == nil
}

// numericHost is the refusal of a host that ends in a number but is not
// written a.b.c.d, naming the address inet_aton reads it as when it reads one.
func (p Policy) numericHost(host string) error {
	ip, ok := inetAton(host)
	if !ok {
		return fmt.Errorf("webhook URL: %w (the host ends in a number but is no IPv4 address)", ErrNotAURL)
	}
	why := ip.String() + " written in a non-standard form"
	if b, special := classify(ip); special {
		why += fmt.Sprintf(", which is %s (%s)", b.name, b.prefix)
	}
	return fmt.Errorf("webhook URL: %w", &refusal{
		subject: "the host " + host,
		why:     why,
		hint:    "write an address as four decimal numbers (a.b.c.d) or use a DNS name",
	})
}

// inetAton reads host as the C library's inet_aton does (and curl, and
// getaddrinfo, and a browser's URL parser): one to four parts, each decimal,
// octal with a leading 0 or hex with 0x, the last filling the remaining
// bytes.
func inetAton(host string) (netip.Addr, bool) {
	parts := strings.Split(host, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	var vals []uint64
	for _, part := range parts {
		base, digits := 10, part
		switch {
		case strings.HasPrefix(part, "0x") || strings.HasPrefix(part, "0X"):
			base, digits = 16, part[2:]
			if digits == "" {
				digits = "0"
			}
		case len(part) > 1 && part[0] == '0':
			base, digits = 8, part[1:]
		}
		v, err := strconv.ParseUint(digits, base, 32)
		if err != nil || digits == "" {
			return netip.Addr{}, false
		}
		vals = append(vals, v)
	}
	var out uint64
	for i, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		out |= v << (24 - 8*i)
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	out |= last
	return netip.AddrFrom4([4]byte{byte(out >> 24), byte(out >> 16), byte(out >> 8), byte(out)}), true
}

// Resolver looks a host name up; net.DefaultResolver is one.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckRegistration is CheckURL and then, for a host name, a lookup through
// r: the name must resolve, and every address it resolves to must pass
// CheckAddr, so a name that points inside the network is refused when the
// endpoint is registered, not only when a delivery connects (the guard on
// every connection stays, against a name that changes its answer).
func (p Policy) CheckRegistration(ctx context.Context, raw string, r Resolver) error {
	name, err := p.checkURL(raw)
	if err != nil || name == "" {
		return err
	}
	addrs, err := r.LookupNetIP(ctx, "ip", name)
	if err != nil {
		return fmt.Errorf("webhook URL: looking up the host: %w", err)
	}
	if len(addrs) == 0 {
		return fmt.Errorf("webhook URL: looking up the host: no address")
	}
	for _, ip := range addrs {
		if err := p.CheckAddr(ip); err != nil {
			var r *refusal
			if errors.As(err, &r) {
				r.subject = "the host resolves to " + r.subject + ", which"
			}
			return fmt.Errorf("webhook URL: %w", err)
		}
	}
	return nil
}

// guardControl is a net.Dialer Control that refuses to connect to an
// address the policy does not open: it runs after name resolution, on the
// address actually dialled, so DNS that answers with an internal address
// (rebinding) is refused too.
func (p Policy) guardControl(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("webhook connection to an unparsable address: %w", ErrBlockedAddress)
	}
	if err := p.CheckAddr(ap.Addr()); err != nil {
		return fmt.Errorf("webhook connection: %w", err)
	}
	return nil
}

// dialer returns the dial function a client uses: every connection,
// whatever the mode, passes the policy's guard.
func (p Policy) dialer() func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Control: p.guardControl}
	return d.DialContext
}

package webhook

import (
	"fmt"
	"net/netip"
	"strings"
)

// block is one address block a webhook may not reach by default, named as
// its registry names it so a refusal says why.
type block struct {
	prefix netip.Prefix
	name   string
}

func mustBlock(prefix, name string) block {
	return block{netip.MustParsePrefix(prefix), name}
}

// specialIPv4 is every block of the IANA IPv4 Special-Purpose Address
// Registry (iana-ipv4-special-registry), whatever its "globally reachable"
// column says (a receiver has no business at an anycast service address or an
// AS112 sink), and the multicast block of the IPv4 address space registry.
// A more specific block comes before the block holding it, so a refusal
// names the narrower purpose.
var specialIPv4 = []block{
	mustBlock("0.0.0.0/32", "this host on this network"),
	mustBlock("0.0.0.0/8", "this network"),
	mustBlock("10.0.0.0/8", "private-use"),
	mustBlock("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
	mustBlock("127.0.0.0/8", "loopback"),
	mustBlock("169.254.0.0/16", "link-local"),
	mustBlock("172.16.0.0/12", "private-use"),
	mustBlock("192.0.0.0/29", "IPv4 service continuity prefix"),
	mustBlock("192.0.0.8/32", "IPv4 dummy address"),
	mustBlock("192.0.0.9/32", "Port Control Protocol anycast"),
	mustBlock("192.0.0.10/32", "Traversal Using Relays around NAT anycast"),
	mustBlock("192.0.0.170/31", "NAT64/DNS64 discovery"),
	mustBlock("192.0.0.0/24", "IETF protocol assignments"),
	mustBlock("192.0.2.0/24", "documentation (TEST-NET-1)"),
	mustBlock("192.31.196.0/24", "AS112-v4"),
	mustBlock("192.52.193.0/24", "Automatic Multicast Tunneling"),
	mustBlock("192.88.99.0/24", "deprecated 6to4 relay anycast"),
	mustBlock("192.168.0.0/16", "private-use"),
	mustBlock("192.175.48.0/24", "direct delegation AS112 service"),
	mustBlock("198.18.0.0/15", "benchmarking"),
	mustBlock("198.51.100.0/24", "documentation (TEST-NET-2)"),
	mustBlock("203.0.113.0/24", "documentation (TEST-NET-3)"),
	mustBlock("224.0.0.0/4", "multicast"),
	mustBlock("255.255.255.255/32", "limited broadcast"),
	mustBlock("240.0.0.0/4", "reserved"),
}

// specialIPv6 is every block of the IANA IPv6 Special-Purpose Address
// Registry (iana-ipv6-special-registry), likewise whatever its "globally
// reachable" column says, and the blocks of the IPv6 address space registry
// that are not global unicast but hold no special-purpose entry. Anything
// else outside 2000::/3 is refused too (globalUnicast6).
var specialIPv6 = []block{
	mustBlock("::1/128", "loopback"),
	mustBlock("::/128", "unspecified"),
	mustBlock("::ffff:0:0/96", "IPv4-mapped"),
	mustBlock("64:ff9b::/96", "IPv4/IPv6 translation (NAT64 well-known prefix)"),
	mustBlock("64:ff9b:1::/48", "local-use IPv4/IPv6 translation"),
	mustBlock("100::/64", "discard-only"),
	mustBlock("100:0:0:1::/64", "dummy IPv6 prefix"),
	mustBlock("2001::/32", "Teredo"),
	mustBlock("2001:1::1/128", "Port Control Protocol anycast"),
	mustBlock("2001:1::2/128", "Traversal Using Relays around NAT anycast"),
	mustBlock("2001:1::3/128", "DNS-SD service registration protocol anycast"),
	mustBlock("2001:2::/48", "benchmarking"),
	mustBlock("2001:3::/32", "Automatic Multicast Tunneling"),
	mustBlock("2001:4:112::/48", "AS112-v6"),
	mustBlock("2001:10::/28", "deprecated ORCHID"),
	mustBlock("2001:20::/28", "ORCHIDv2"),
	mustBlock("2001:30::/28", "drone remote ID entity tags"),
	mustBlock("2001::/23", "IETF protocol assignments"),
	mustBlock("2001:db8::/32", "documentation"),
	mustBlock("2002::/16", "6to4"),
	mustBlock("2620:4f:8000::/48", "direct delegation AS112 service"),
	mustBlock("3fff::/20", "documentation"),
	mustBlock("5f00::/16", "segment routing (SRv6) SIDs"),
	mustBlock("fc00::/7", "unique local"),
	mustBlock("fe80::/10", "link-local"),
	mustBlock("fec0::/10", "deprecated site-local"),
	mustBlock("ff00::/8", "multicast"),
}

// globalUnicast6 is the only IPv6 space IANA assigns global unicast
// addresses from.
var globalUnicast6 = mustBlock("2000::/3", "global unicast")

// Blocks that no setting opens: loopback only in the insecure (local) mode,
// the others never (they name no receiver). ParsePrivateNetworks refuses a
// listed range that overlaps one of them.
var (
	loopbackBlocks = []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	neverBlocks    = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"), netip.MustParsePrefix("::/128"),
		netip.MustParsePrefix("224.0.0.0/4"), netip.MustParsePrefix("ff00::/8"),
		netip.MustParsePrefix("255.255.255.255/32"),
	}
)

// Prefixes whose addresses carry an IPv4 address (RFC 6052, RFC 3056,
// RFC 4380); a connection to one of them reaches, or is translated or
// tunnelled to, that IPv4 address.
var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	teredoPrefix = netip.MustParsePrefix("2001::/32")
)

// embeddedIPv4 returns the IPv4 address ip carries and the form carrying
// it: IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible (::a.b.c.d, deprecated
// but still routed to a.b.c.d by some stacks), NAT64 (64:ff9b::a.b.c.d), 6to4
// (2002:AABB:CCDD::/48) or Teredo (2001:0::/32, the client's address
// inverted in the last 32 bits).
func embeddedIPv4(ip netip.Addr) (netip.Addr, string, bool) {
	if !ip.Is6() {
		return netip.Addr{}, "", false
	}
	b := ip.As16()
	switch {
	case ip.Is4In6():
		return ip.Unmap(), "IPv4-mapped", true
	case nat64Prefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64", true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4", true
	case teredoPrefix.Contains(ip):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), "Teredo", true
	case [12]byte(b[:12]) == [12]byte{} && !ip.IsUnspecified() && !ip.IsLoopback():
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-compatible", true
	}
	return netip.Addr{}, "", false
}

// classify returns the block ip falls in, or false for a global unicast
// address. ip is unmapped and zoneless.
func classify(ip netip.Addr) (block, bool) {
	list := specialIPv6
	if ip.Is4() {
		list = specialIPv4
	}
	for _, b := range list {
		if b.prefix.Contains(ip) {
			return b, true
		}
	}
	if ip.Is6() && !globalUnicast6.prefix.Contains(ip) {
		return block{globalUnicast6.prefix, "outside the global unicast space"}, true
	}
	return block{}, false
}

func containsAny(prefixes []netip.Prefix, ip netip.Addr) bool {
	for _, p := range prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Hints a refusal ends with: what would allow the address, when something can.
const (
	hintLoopback = "SP_WEBHOOK_ALLOW_INSECURE=true allows loopback (and http://) on local stacks and in tests"
	hintPrivate  = "to deliver inside your own network, list the range in SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS (e.g. 10.20.0.0/16)"
)

// refusal is why an address or host is refused; it wraps ErrBlockedAddress.
type refusal struct {
	subject string // what was judged: an address, or a description of the host
	why     string // e.g. "private-use (10.0.0.0/8)"
	hint    string // empty when no setting allows it
}

func (r *refusal) Error() string {
	s := fmt.Sprintf("%s is %s: %v", r.subject, r.why, ErrBlockedAddress)
	if r.hint != "" {
		s += "; " + r.hint
	}
	return s
}

func (r *refusal) Unwrap() error { return ErrBlockedAddress }

// CheckAddr reports whether a webhook may connect to ip under the policy:
// nil for a global unicast address; for an address in a special-purpose
// block, nil only when the policy opens it (loopback in the insecure mode, a
// listed private range), else an error wrapping ErrBlockedAddress that names
// the block. An IPv6 address carrying an IPv4 address is judged by that IPv4
// address first, then, unless IPv4-mapped (which is that address), by its own
// block too.
func (p Policy) CheckAddr(ip netip.Addr) error {
	if !ip.IsValid() {
		return &refusal{subject: "the invalid address", why: "no address"}
	}
	ip = ip.WithZone("")
	if v4, form, ok := embeddedIPv4(ip); ok {
		if err := p.checkPlain(v4); err != nil {
			r := err.(*refusal)
			r.subject = fmt.Sprintf("%s (%s, carrying %s)", ip, form, v4)
			return r
		}
		if form == "IPv4-mapped" {
			return nil
		}
	}
	return p.checkPlain(ip)
}

// checkPlain judges ip by its own block alone.
func (p Policy) checkPlain(ip netip.Addr) error {
	b, special := classify(ip)
	if !special {
		return nil
	}
	r := &refusal{subject: ip.String(), why: fmt.Sprintf("%s (%s)", b.name, b.prefix)}
	switch {
	case containsAny(loopbackBlocks, ip):
		if p.AllowInsecure {
			return nil
		}
		r.hint = hintLoopback
	case containsAny(neverBlocks, ip):
	case containsAny(p.PrivateNetworks, ip):
		return nil
	default:
		r.hint = hintPrivate
	}
	return r
}

// ParsePrivateNetworks reads a comma-separated list of CIDR prefixes
// (SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS) naming the non-public ranges webhooks
// may reach. A prefix must be written masked (10.20.0.0/16, not
// 10.20.1.0/16), in its IPv4 form rather than IPv4-mapped, and must not
// overlap loopback (SP_WEBHOOK_ALLOW_INSECURE's alone), unspecified,
// multicast or broadcast space: so 0.0.0.0/0 or ::/0 cannot open everything.
func ParsePrivateNetworks(list string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, item := range strings.Split(list, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		p, err := netip.ParsePrefix(item)
		if err != nil {
			return nil, fmt.Errorf("private network %q: not a CIDR prefix such as 10.20.0.0/16: %w", item, err)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("private network %s: write an IPv4 range in its IPv4 form, e.g. %s", p, netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0)).Masked())
		}
		if m := p.Masked(); m != p {
			return nil, fmt.Errorf("private network %s: the address has bits set beyond the prefix length; the range is %s", p, m)
		}
		for _, lb := range loopbackBlocks {
			if p.Overlaps(lb) {
				return nil, fmt.Errorf("private network %s overlaps loopback %s, which only SP_WEBHOOK_ALLOW_INSECURE=true allows", p, lb)
			}
		}
		for _, nb := range neverBlocks {
			if p.Overlaps(nb) {
				return nil, fmt.Errorf("private network %s overlaps %s, which no webhook may reach", p, nb)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

package webhook

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
)

// The IANA special-purpose registries (iana-ipv4-special-registry,
// iana-ipv6-special-registry), copied here from the registries rather than
// from the code, plus IPv4 multicast and the IPv6 blocks outside global
// unicast space: the first and the last address of every block is refused.
var registryBlocks = []string{
	// IPv4
	"0.0.0.0/8", "0.0.0.0/32", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16",
	"172.16.0.0/12", "192.0.0.0/24", "192.0.0.0/29", "192.0.0.8/32", "192.0.0.9/32", "192.0.0.10/32",
	"192.0.0.170/32", "192.0.0.171/32", "192.0.2.0/24", "192.31.196.0/24", "192.52.193.0/24",
	"192.88.99.0/24", "192.168.0.0/16", "192.175.48.0/24", "198.18.0.0/15", "198.51.100.0/24",
	"203.0.113.0/24", "240.0.0.0/4", "255.255.255.255/32", "224.0.0.0/4",
	// IPv6
	"::1/128", "::/128", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "100::/64", "100:0:0:1::/64",
	"2001::/23", "2001::/32", "2001:1::1/128", "2001:1::2/128", "2001:1::3/128", "2001:2::/48",
	"2001:3::/32", "2001:4:112::/48", "2001:10::/28", "2001:20::/28", "2001:30::/28", "2001:db8::/32",
	"2002::/16", "2620:4f:8000::/48", "3fff::/20", "5f00::/16", "fc00::/7", "fe80::/10", "ff00::/8",
	"fec0::/10", "::/8", "4000::/3",
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func TestCheckAddrRefusesEveryRegistryBlock(t *testing.T) {
	for _, raw := range registryBlocks {
		p := netip.MustParsePrefix(raw)
		for _, ip := range []netip.Addr{p.Masked().Addr(), lastAddr(p)} {
			err := Policy{}.CheckAddr(ip)
			if !errors.Is(err, ErrBlockedAddress) {
				t.Errorf("CheckAddr(%s) in %s = %v, want refused", ip, p, err)
			}
		}
	}
	for _, raw := range []string{
		"8.8.8.8", "1.1.1.1", "93.184.215.14", "11.0.0.1", "100.63.255.255", "100.128.0.0", "172.15.255.255",
		"172.32.0.0", "192.0.1.1", "192.167.255.255", "192.169.0.0", "198.17.255.255", "198.20.0.0",
		"223.255.255.255", "2606:4700:4700::1111", "2a00:1450:4001:80b::200e", "2001:200::1", "2620:4f:8001::1",
	} {
		if err := (Policy{}).CheckAddr(netip.MustParseAddr(raw)); err != nil {
			t.Errorf("CheckAddr(%s), a global unicast address: %v", raw, err)
		}
	}
}

// An IPv6 address that carries an IPv4 address is judged by that IPv4
// address, and the refusal names it.
func TestCheckAddrUnwrapsEmbeddedIPv4(t *testing.T) {
	nat64, err := NewPolicy(false, "64:ff9b::/96")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		policy Policy
		addr   string
		names  string // "" when allowed
	}{
		{Policy{}, "::ffff:127.0.0.1", "127.0.0.1"},
		{Policy{}, "::ffff:10.1.2.3", "10.1.2.3"},
		{Policy{}, "::ffff:169.254.169.254", "169.254.169.254"},
		{Policy{}, "::ffff:8.8.8.8", ""},
		{Policy{}, "::127.0.0.1", "127.0.0.1"},     // IPv4-compatible
		{Policy{}, "::8.8.8.8", "2000::/3"},        // IPv4-compatible: not global unicast itself
		{Policy{}, "64:ff9b::7f00:1", "127.0.0.1"}, // NAT64
		{Policy{}, "64:ff9b::a9fe:a9fe", "169.254.169.254"},
		{Policy{}, "64:ff9b::808:808", "64:ff9b::/96"}, // the NAT64 block itself, unless listed
		{nat64, "64:ff9b::808:808", ""},
		{nat64, "64:ff9b::a00:1", "10.0.0.1"},
		{Policy{}, "2002:7f00:1::1", "127.0.0.1"},          // 6to4
		{Policy{}, "2002:a9fe:a9fe::1", "169.254.169.254"}, // 6to4
		{Policy{}, "2002:808:808::1", "2002::/16"},
		{Policy{}, "2001:0:4136:e378:8000:63bf:80ff:fffe", "127.0.0.1"}, // Teredo, client 127.0.0.1 inverted
		{Policy{AllowInsecure: true}, "::ffff:127.0.0.1", ""},
		{Policy{AllowInsecure: true}, "::ffff:192.168.1.1", "192.168.1.1"},
		{Policy{AllowInsecure: true}, "64:ff9b::7f00:1", "64:ff9b::/96"},
	} {
		err := tt.policy.CheckAddr(netip.MustParseAddr(tt.addr))
		switch {
		case tt.names == "" && err != nil:
			t.Errorf("CheckAddr(%s) under %+v: %v, want allowed", tt.addr, tt.policy, err)
		case tt.names != "" && (!errors.Is(err, ErrBlockedAddress) || !strings.Contains(err.Error(), tt.names)):
			t.Errorf("CheckAddr(%s) under %+v: %v, want refused naming %s", tt.addr, tt.policy, err, tt.names)
		}
	}
}

// Hosts written to hide an internal address are refused by CheckURL,
// before any lookup, with an error that says what the host is.
func TestCheckURLRefusesDisguisedHosts(t *testing.T) {
	for _, tt := range []struct {
		host string
		want error
		says string
	}{
		{"localhost", ErrBlockedAddress, "localhost name"},
		{"LocalHost.", ErrBlockedAddress, "localhost name"},
		{"api.localhost", ErrBlockedAddress, "localhost name"},
		{"a.b.localhost.", ErrBlockedAddress, "localhost name"},
		{"ｌｏｃａｌｈｏｓｔ", ErrBlockedAddress, "localhost name"},       // full-width, which net/http maps before dialling
		{"loc\u00adalhost", ErrBlockedAddress, "localhost name"}, // a soft hyphen, dropped the same way
		{"0", ErrBlockedAddress, "0.0.0.0 written in a non-standard form"},
		{"2130706433", ErrBlockedAddress, "127.0.0.1 written in a non-standard form"},
		{"0x7f000001", ErrBlockedAddress, "127.0.0.1"},
		{"0x7f.1", ErrBlockedAddress, "127.0.0.1"},
		{"0X7F.0.0.1", ErrBlockedAddress, "127.0.0.1"},
		{"017700000001", ErrBlockedAddress, "127.0.0.1"},
		{"0177.0.0.1", ErrBlockedAddress, "127.0.0.1"},
		{"127.1", ErrBlockedAddress, "127.0.0.1"},
		{"127.0.0.1.", ErrBlockedAddress, "127.0.0.1"},
		{"10.0.0.1.", ErrBlockedAddress, "10.0.0.1"},
		{"3232235777", ErrBlockedAddress, "192.168.1.1"},
		{"2852039166", ErrBlockedAddress, "169.254.169.254"},
		{"１２７.０.０.１", ErrBlockedAddress, "127.0.0.1"},
		{"①②⑦.0.0.1", ErrBlockedAddress, "127.0.0.1"},
		{"134744072", ErrBlockedAddress, "8.8.8.8 written in a non-standard form"}, // even a public one: resolvers disagree
		{"1.2.3.4.5", ErrNotAURL, "ends in a number"},
		{"999.0.0.1", ErrNotAURL, "ends in a number"},
		{"127.0.0.1", ErrBlockedAddress, "loopback (127.0.0.0/8)"},
		{"0.0.0.0", ErrBlockedAddress, "0.0.0.0/"},
		{"[::]", ErrBlockedAddress, "unspecified"},
		{"[::1]", ErrBlockedAddress, "loopback"},
		{"[::ffff:127.0.0.1]", ErrBlockedAddress, "127.0.0.1"},
		{"[::ffff:7f00:1]", ErrBlockedAddress, "127.0.0.1"},
		{"[0:0:0:0:0:ffff:a9fe:a9fe]", ErrBlockedAddress, "169.254.169.254"},
		{"[64:ff9b::7f00:1]", ErrBlockedAddress, "127.0.0.1"},
		{"[fe80::1%25eth0]", ErrNotAURL, "zone"},
		{"[fd00::1]", ErrBlockedAddress, "unique local"},
		{"a..example.com", ErrNotAURL, "empty label"},
	} {
		err := Policy{}.CheckURL("https://" + tt.host + "/hook?token=s3cr3t")
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("CheckURL(https://%s/…) = %v; want %v saying %q", tt.host, err, tt.want, tt.says)
		}
		if err != nil && strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("CheckURL's error quotes the URL: %v", err)
		}
	}
	for _, ok := range []string{"https://8.8.8.8/hook", "https://[2606:4700:4700::1111]:8443/hook", "https://hooks.example.com./hook", "https://bücher.example/hook", "https://my_hook.example.com/hook", "https://HOOKS.Example.com/hook"} {
		if err := (Policy{}).CheckURL(ok); err != nil {
			t.Errorf("CheckURL(%s): %v", ok, err)
		}
	}
}

// fakeResolver answers from a table, so no test ever asks real DNS.
type fakeResolver map[string][]string

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	raw, ok := f[strings.TrimSuffix(host, ".")]
	if !ok {
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}
	var out []netip.Addr
	for _, r := range raw {
		out = append(out, netip.MustParseAddr(r))
	}
	return out, nil
}

// At registration a host name is resolved and every address it resolves
// to judged: a name pointing inside the network is refused there and then.
func TestCheckRegistrationResolves(t *testing.T) {
	dns := fakeResolver{
		"hooks.example.com":    {"93.184.215.14", "2606:2800:21f:cb07:6820:80da:af6b:8b2c"},
		"internal.example.com": {"10.1.2.3"},
		"mixed.example.com":    {"93.184.215.14", "169.254.169.254"},
		"mapped.example.com":   {"::ffff:127.0.0.1"},
		"localhost":            {"127.0.0.1", "::1"},
		"db.corp.example":      {"10.20.3.4"},
	}
	private, err := NewPolicy(false, "10.20.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		policy Policy
		url    string
		says   string // "" when allowed
	}{
		{Policy{}, "https://hooks.example.com/hook", ""},
		{Policy{}, "https://hooks.example.com./hook", ""},
		{Policy{}, "https://internal.example.com/hook", "the host resolves to 10.1.2.3, which is private-use (10.0.0.0/8): webhooks reach only public"},
		{Policy{}, "https://mixed.example.com/hook", "169.254.169.254"},
		{Policy{}, "https://mapped.example.com/hook", "127.0.0.1"},
		{Policy{}, "https://nowhere.example.com/hook", "looking up the host"},
		{Policy{}, "https://db.corp.example/hook", "10.20.3.4"},
		{private, "https://db.corp.example/hook", ""},
		{private, "https://internal.example.com/hook", "10.1.2.3"},
		{Policy{AllowInsecure: true}, "http://localhost:8080/hook", ""},
		{Policy{AllowInsecure: true}, "http://internal.example.com/hook", "10.1.2.3"},
		{Policy{AllowInsecure: true}, "http://db.corp.example/hook", "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS"},
	} {
		err := tt.policy.CheckRegistration(context.Background(), tt.url, dns)
		if tt.says == "" && err != nil || tt.says != "" && (err == nil || !strings.Contains(err.Error(), tt.says)) {
			t.Errorf("CheckRegistration(%s) under %+v = %v; want %q", tt.url, tt.policy, err, tt.says)
		}
	}
}

// SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS opens the ranges it lists and nothing
// else, never loopback; the insecure switch opens http:// and loopback and
// nothing else.
func TestPolicyModes(t *testing.T) {
	private, err := NewPolicy(false, " 10.20.0.0/16, fd00:20::/48 ,100.64.0.0/10")
	if err != nil {
		t.Fatal(err)
	}
	insecure := Policy{AllowInsecure: true}
	both, err := NewPolicy(true, "10.20.0.0/16")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name    string
		policy  Policy
		allowed []string
		refused []string
	}{
		{"production", Policy{}, []string{"8.8.8.8"},
			[]string{"127.0.0.1", "::1", "10.20.0.1", "192.168.1.1", "169.254.169.254", "fd00:20::1", "fe80::1"}},
		{"private networks", private,
			[]string{"10.20.0.1", "10.20.255.254", "fd00:20::5", "::ffff:10.20.3.4", "100.64.1.1", "8.8.8.8"},
			[]string{"10.21.0.1", "10.19.255.255", "192.168.1.1", "172.16.0.1", "169.254.169.254", "fd00:21::5", "fe80::1",
				"127.0.0.1", "::1", "::ffff:127.0.0.1", "0.0.0.0"}},
		{"insecure", insecure,
			[]string{"127.0.0.1", "127.255.0.1", "::1", "::ffff:127.0.0.1", "8.8.8.8"},
			[]string{"10.0.0.1", "10.20.0.1", "169.254.169.254", "169.254.0.1", "192.168.1.1", "172.16.0.1", "100.64.0.1",
				"fd00::1", "fe80::1", "0.0.0.0", "::", "224.0.0.1", "255.255.255.255", "192.0.2.1"}},
		{"insecure and private", both,
			[]string{"127.0.0.1", "10.20.0.1"},
			[]string{"10.21.0.1", "169.254.169.254"}},
	} {
		for _, a := range tt.allowed {
			if err := tt.policy.CheckAddr(netip.MustParseAddr(a)); err != nil {
				t.Errorf("%s: CheckAddr(%s) = %v, want allowed", tt.name, a, err)
			}
			if err := tt.policy.guardControl("tcp", netip.AddrPortFrom(netip.MustParseAddr(a), 443).String(), nil); err != nil {
				t.Errorf("%s: the dialer's guard refuses %s: %v", tt.name, a, err)
			}
		}
		for _, r := range tt.refused {
			if err := tt.policy.CheckAddr(netip.MustParseAddr(r)); !errors.Is(err, ErrBlockedAddress) {
				t.Errorf("%s: CheckAddr(%s) = %v, want refused", tt.name, r, err)
			}
			if err := tt.policy.guardControl("tcp", netip.AddrPortFrom(netip.MustParseAddr(r), 443).String(), nil); !errors.Is(err, ErrBlockedAddress) {
				t.Errorf("%s: the dialer's guard lets %s through: %v", tt.name, r, err)
			}
		}
	}
	if err := private.CheckURL("http://10.20.0.1/hook"); !errors.Is(err, ErrInsecureURL) {
		t.Errorf("private networks allow http://: %v", err)
	}
	if err := insecure.CheckURL("http://127.0.0.1:8080/hook"); err != nil {
		t.Errorf("insecure refuses http:// to loopback: %v", err)
	}
	if err := insecure.CheckURL("http://10.0.0.1/hook"); !errors.Is(err, ErrBlockedAddress) || !strings.Contains(err.Error(), "SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS") {
		t.Errorf("insecure and 10.0.0.1: %v, want refused pointing at SP_WEBHOOK_ALLOW_PRIVATE_NETWORKS", err)
	}
	if err := (Policy{}).CheckURL("https://127.0.0.1/hook"); err == nil || !strings.Contains(err.Error(), "SP_WEBHOOK_ALLOW_INSECURE") {
		t.Errorf("production and loopback: %v, want refused pointing at SP_WEBHOOK_ALLOW_INSECURE", err)
	}
	if err := (Policy{}).guardControl("tcp", "[fe80::1%eth0]:443", nil); !errors.Is(err, ErrBlockedAddress) {
		t.Errorf("the dialer's guard lets a zoned link-local address through: %v", err)
	}
}

func TestParsePrivateNetworks(t *testing.T) {
	got, err := ParsePrivateNetworks("10.20.0.0/16,, fd00:20::/48 ")
	if err != nil || len(got) != 2 || got[0].String() != "10.20.0.0/16" || got[1].String() != "fd00:20::/48" {
		t.Fatalf("ParsePrivateNetworks = %v, %v", got, err)
	}
	if got, err := ParsePrivateNetworks(""); err != nil || len(got) != 0 {
		t.Fatalf("ParsePrivateNetworks(\"\") = %v, %v", got, err)
	}
	for _, tt := range []struct{ list, says string }{
		{"10.20.0.0", "not a CIDR prefix"},
		{"intranet", "not a CIDR prefix"},
		{"10.20.1.0/16", "the range is 10.20.0.0/16"},
		{"127.0.0.0/8", "loopback"},
		{"10.0.0.0/8,127.0.0.1/32", "loopback"},
		{"0.0.0.0/0", "overlaps"},
		{"::/0", "overlaps"},
		{"::1/128", "loopback"},
		{"224.0.0.0/4", "224.0.0.0/4"},
		{"::ffff:10.0.0.0/104", "10.0.0.0/8"},
	} {
		if _, err := ParsePrivateNetworks(tt.list); err == nil || !strings.Contains(err.Error(), tt.says) {
			t.Errorf("ParsePrivateNetworks(%q) = %v, want an error saying %q", tt.list, err, tt.says)
		}
	}
}

func TestInetAton(t *testing.T) {
	for in, want := range map[string]string{
		"0": "0.0.0.0", "2130706433": "127.0.0.1", "0x7f.1": "127.0.0.1", "127.1": "127.0.0.1",
		"0177.0.0.1": "127.0.0.1", "127.0.1": "127.0.0.1", "0x7f000001": "127.0.0.1", "192.168.257": "192.168.1.1",
		"0x": "0.0.0.0",
	} {
		if got, ok := inetAton(in); !ok || got.String() != want {
			t.Errorf("inetAton(%q) = %v, %t; want %s", in, got, ok, want)
		}
	}
	for _, bad := range []string{"256.0.0.1", "1.2.3.256", "4294967296", "08", "1.2.3.4.5"} {
		if got, ok := inetAton(bad); ok {
			t.Errorf("inetAton(%q) = %v, want no address", bad, got)
		}
	}
}

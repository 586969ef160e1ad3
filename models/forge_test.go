package models

import (
	"slices"
	"strings"
	"testing"
)

// TestAllowedFrom: addresses and prefixes are kept normalised, and a
// sender's address matches as the forge's would: an IPv4-mapped prefix,
// which no sender's address (compared as IPv4) could match, is taken as
// its IPv4 prefix — it was kept as given and refused every delivery.
func TestAllowedFrom(t *testing.T) {
	a, err := ParseAllowedFrom("allowed_from", []string{"192.0.2.10", " 140.82.112.7/20 ", "::ffff:198.51.100.0/120", "2001:db8::/32", "::ffff:203.0.113.9"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"192.0.2.10", "140.82.112.0/20", "198.51.100.0/24", "2001:db8::/32", "203.0.113.9"}; !slices.Equal(a, want) {
		t.Fatalf("normalised: %v, want %v", a, want)
	}
	for ip, want := range map[string]bool{
		"192.0.2.10": true, "192.0.2.11": false, "140.82.127.255": true, "198.51.100.77": true, "::ffff:198.51.100.77": true,
		"2001:db8:1::5": true, "2001:db9::1": false, "203.0.113.9": true, "not an address": false,
	} {
		if got := a.Allows(ip); got != want {
			t.Errorf("%s: allowed %v, want %v", ip, got, want)
		}
	}
	if !(AllowedFrom{}).Allows("198.18.0.1") {
		t.Error("none listed allows any address")
	}
	for in, why := range map[string]string{
		"nope":              "is neither an IP address nor a CIDR prefix",
		"fe80::1%eth0":      "is neither an IP address nor a CIDR prefix",
		"::ffff:0.0.0.0/64": "mixes IPv4-mapped and other IPv6 addresses",
	} {
		if _, err := ParseAllowedFrom("allowed_from", []string{in}); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v", in, err)
		}
	}
}

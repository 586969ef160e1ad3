package api

import (
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"
)

// TestRenewalDue: a connection is kept only while the certificate it
// presented is not yet due for renewal (two thirds of its lifetime): a
// renewed one is presented only on a new handshake.
func TestRenewalDue(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	cs := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{{NotBefore: start, NotAfter: start.Add(90 * time.Hour)}}}
	for _, c := range []struct {
		name string
		cs   *tls.ConnectionState
		at   time.Time
		want bool
	}{
		{"plain HTTP", nil, start, false},
		{"no certificate (bearer over TLS)", &tls.ConnectionState{}, start, false},
		{"fresh", cs, start.Add(time.Hour), false},
		{"just before two thirds", cs, start.Add(59 * time.Hour), false},
		{"past two thirds", cs, start.Add(61 * time.Hour), true},
		{"expired", cs, start.Add(100 * time.Hour), true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := renewalDue(c.cs, c.at); got != c.want {
				t.Fatalf("renewalDue = %v, want %v", got, c.want)
			}
		})
	}
}

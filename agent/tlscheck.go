package agent

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"mesh/models"
)

// runTLSCheck handshakes with the check's address and verifies the chain
// presented against the mesh CA (the one the host pinned at enrolment)
// for the server name: "module A reaches module B by its internal name"
// is then a fact with a time. A failure says why: another CA, a name the
// certificate does not carry, expired, or no answer.
func runTLSCheck(ctx context.Context, ca *x509.Certificate, c *models.Check) checkResult {
	what := fmt.Sprintf("tls %s (%s)", c.TLS, c.ServerName)
	if ca == nil {
		return checkResult{final: true, detail: what + ": this host holds no mesh CA to verify by (enrolled over plain HTTP)"}
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	d := tls.Dialer{Config: &tls.Config{RootCAs: pool, ServerName: c.ServerName, MinVersion: tls.VersionTLS12}}
	conn, err := d.DialContext(ctx, "tcp", c.TLS)
	if err != nil {
		return checkResult{detail: what + ": " + tlsWhy(err)}
	}
	defer conn.Close()
	st := conn.(*tls.Conn).ConnectionState()
	leaf := st.PeerCertificates[0]
	return checkResult{ok: true, detail: fmt.Sprintf("%s: verified against the mesh CA, %s until %s", what,
		strings.Join(leaf.DNSNames, ", "), leaf.NotAfter.UTC().Format("2006-01-02T15:04:05Z"))}
}

// tlsWhy says in words why a handshake failed verification.
func tlsWhy(err error) string {
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	var ve *tls.CertificateVerificationError
	switch {
	case errors.As(err, &ua):
		issuer := ""
		if ua.Cert != nil {
			issuer = fmt.Sprintf(" (issued by %q)", ua.Cert.Issuer.String())
		}
		return "the presented chain does not verify against the mesh CA: signed by another authority" + issuer
	case errors.As(err, &hn):
		names := "no DNS names"
		if hn.Certificate != nil && len(hn.Certificate.DNSNames) > 0 {
			names = strings.Join(hn.Certificate.DNSNames, ", ")
		}
		return fmt.Sprintf("the certificate is not valid for %s (it names %s)", hn.Host, names)
	case errors.As(err, &ci):
		return "the certificate is not valid: " + ci.Error()
	case errors.As(err, &ve):
		return "verification failed: " + ve.Err.Error()
	}
	return err.Error()
}

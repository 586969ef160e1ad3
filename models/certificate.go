package models

import (
	"fmt"
	"net"
	"path"
	"regexp"
	"strings"
	"time"
)

// Bounds of a certificate resource. The lifetime floor lets a test renew
// within seconds; the ceiling keeps a leaked key's use short.
const (
	DefaultCertificateLifetime = 30 * 24 * time.Hour
	MinCertificateLifetime     = 10 * time.Second
	MaxCertificateLifetime     = 366 * 24 * time.Hour
	MaxCertificateNames        = 16
	DefaultCertificateKeyMode  = "0600"
)

var (
	ownerRE    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}(:[a-z_][a-z0-9_-]{0,31})?$`)
	dnsLabelRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	modeRE     = regexp.MustCompile(`^0[0-7]{3}$`)
)

// Signals a certificate's renewal may send a service instead of restarting it.
var renewSignals = map[string]bool{"HUP": true, "USR1": true, "USR2": true}

// ValidSignal reports whether s is a signal on_renew may name.
func ValidSignal(s string) bool { return renewSignals[s] }

// ValidDNSName checks a certificate name: lowercase labels of letters,
// digits and '-', dot-separated, at most 253 bytes, no wildcard (a
// wildcard would give a machine names the declaration did not).
func ValidDNSName(n string) error {
	if n == "" || len(n) > 253 {
		return fmt.Errorf("%q: a DNS name is 1 to 253 bytes", n)
	}
	for _, l := range strings.Split(n, ".") {
		if !dnsLabelRE.MatchString(l) {
			return fmt.Errorf("%q: label %q is not lowercase letters, digits and '-' (no wildcards)", n, l)
		}
	}
	return nil
}

// CertificateLifetime is r's lifetime, the default when none is declared.
func CertificateLifetime(lifetime string) (time.Duration, error) {
	if lifetime == "" {
		return DefaultCertificateLifetime, nil
	}
	d, err := time.ParseDuration(lifetime)
	if err != nil {
		return 0, fmt.Errorf("lifetime %q is not a duration like 720h", lifetime)
	}
	if d < MinCertificateLifetime || d > MaxCertificateLifetime {
		return 0, fmt.Errorf("lifetime %s is outside %s..%s", d, MinCertificateLifetime, MaxCertificateLifetime)
	}
	return d, nil
}

// RenewAt is when a certificate of the declared lifetime that expires at
// notAfter is renewed: two thirds of the way through its lifetime, so a
// controller that is away for a third of it still leaves the service a
// valid certificate. Counted from notAfter, not NotBefore, which the CA
// backdates a little for clocks behind.
func RenewAt(notAfter time.Time, lifetime time.Duration) time.Time {
	return notAfter.Add(-lifetime / 3)
}

func cleanAbs(p string) bool {
	return strings.HasPrefix(p, "/") && !strings.Contains(p, "..") && path.Clean(p) == p && p != "/"
}

// checkManifestCertificate holds a manifest's certificate resource to its
// rules; placeholders in names and paths are checked once substituted.
func checkManifestCertificate(f string, r *ManifestResource, kinds map[string]string) error {
	if len(r.Names) == 0 || len(r.Names) > MaxCertificateNames {
		return Invalid(f+".names", fmt.Sprintf("a certificate names 1 to %d DNS names", MaxCertificateNames))
	}
	for i, n := range r.Names {
		if err := ValidDNSName(placeholderRE.ReplaceAllString(n, "x")); err != nil {
			return Invalid(fmt.Sprintf("%s.names[%d]", f, i), err.Error())
		}
	}
	for field, p := range map[string]string{".path": r.Path, ".key_path": r.KeyPath} {
		if !cleanAbs(p) {
			return Invalid(f+field, "an absolute, clean path without '..', not / itself, is needed (the chain is path, the key key_path)")
		}
		if MeshWorkPath(p) != "" {
			return meshWorkInvalid(f+field, p)
		}
	}
	if r.Path == r.KeyPath {
		return Invalid(f+".key_path", "the key and the chain need two files")
	}
	if r.Mode != "" && !modeRE.MatchString(r.Mode) {
		return Invalid(f+".mode", "mode (of the key file) is octal like 0600")
	}
	if r.Owner != "" && !ownerRE.MatchString(r.Owner) {
		return Invalid(f+".owner", "owner is user or user:group")
	}
	if _, err := CertificateLifetime(r.Lifetime); err != nil {
		return Invalid(f+".lifetime", err.Error())
	}
	for i, o := range r.OnRenew {
		g := fmt.Sprintf("%s.on_renew[%d]", f, i)
		if kinds[o.Service] != "service" {
			return Invalid(g+".service", fmt.Sprintf("%q names no service of this manifest", o.Service))
		}
		if o.Signal != "" && !ValidSignal(o.Signal) {
			return Invalid(g+".signal", "signal is HUP, USR1 or USR2 (none: restart)")
		}
	}
	if r.Content != nil || r.Artifact != nil || len(r.Command) > 0 || r.Env != nil || r.Check != nil {
		return Invalid(f, "a certificate has names, path, key_path, mode, owner, lifetime and on_renew only")
	}
	return nil
}

// checkNotCertificate refuses certificate fields on another kind: they
// would be silently ignored by the host.
func checkNotCertificate(f string, r *ManifestResource) error {
	if r.Names != nil || r.KeyPath != "" || r.Owner != "" || r.Lifetime != "" || r.OnRenew != nil {
		return Invalid(f, "names, key_path, owner, lifetime and on_renew belong to a certificate only")
	}
	return nil
}

// checkTLSCheck holds a tls check (schema 2): an address host:port and a
// server name to verify the chain for.
func checkTLSCheck(f string, c *Check) error {
	if c.TLS == "" {
		if c.ServerName != "" {
			return Invalid(f+".server_name", "server_name belongs to a tls check")
		}
		return nil
	}
	addr := placeholderRE.ReplaceAllString(c.TLS, "x")
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return Invalid(f+".tls", fmt.Sprintf("%q is not host:port", c.TLS))
	}
	if c.ServerName == "" {
		return Invalid(f+".server_name", "a tls check names the server name its chain must verify for")
	}
	if err := ValidDNSName(placeholderRE.ReplaceAllString(c.ServerName, "x")); err != nil {
		return Invalid(f+".server_name", err.Error())
	}
	return nil
}

// checkComposedSchema2 holds a substituted resource's schema-2 fields to
// what a host checks.
func checkComposedSchema2(r *Resource) error {
	if r.Kind == ResourceCertificate {
		if !cleanAbs(r.Path) || !cleanAbs(r.KeyPath) || MeshWorkPath(r.Path) != "" || MeshWorkPath(r.KeyPath) != "" {
			return Invalid("path", fmt.Sprintf("%q or %q is not an absolute, clean path once substituted", r.Path, r.KeyPath))
		}
		for _, n := range r.Names {
			if err := ValidDNSName(n); err != nil {
				return Invalid("names", err.Error()+" once substituted")
			}
		}
	}
	if r.Check != nil && r.Check.TLS != "" {
		if _, _, err := net.SplitHostPort(r.Check.TLS); err != nil {
			return Invalid("check.tls", fmt.Sprintf("%q is not host:port once substituted", r.Check.TLS))
		}
		if err := ValidDNSName(r.Check.ServerName); err != nil {
			return Invalid("check.server_name", err.Error()+" once substituted")
		}
	}
	return nil
}

// CertificateNames are the DNS names the declaration p gives its machine in
// certificate resource id: the only names the controller signs for it.
func CertificateNames(p *DeclarationPayload, id string) ([]string, string, bool) {
	for _, r := range p.Resources {
		if r.ID == id && r.Kind == ResourceCertificate {
			return r.Names, r.Lifetime, true
		}
	}
	return nil, "", false
}

// CertificateRequest is a host's request for a service certificate: the
// send of the declaration that gives the names, the certificate resource,
// and the CSR (PEM) whose key the host made and keeps.
type CertificateRequest struct {
	Send     string `json:"send"`
	Resource string `json:"resource"`
	CSR      string `json:"csr"`
}

// Validate checks the request's shape (the CSR itself is read by meshca).
func (r *CertificateRequest) Validate() error {
	idErr := ValidResourceID(r.Resource)
	switch {
	case r.Send == "":
		return Invalid("send", "the send of the applied (or applying) declaration that gives the names")
	case len(r.Send) > 64:
		return Invalid("send", "a send id, at most 64 characters")
	case r.Resource == "":
		return Invalid("resource", "the certificate resource's id, like web.cert")
	case idErr != nil:
		return Invalid("resource", idErr.Error())
	case r.CSR == "":
		return Invalid("csr", "a PEM CERTIFICATE REQUEST")
	case len(r.CSR) > 16<<10:
		return Invalid("csr", "at most 16 KiB")
	}
	return nil
}

// CheckCertificateGrant says whether a machine may have a certificate for
// asked: the declaration of its send (the machine's own, not older than
// what it applied) must give exactly these names to resource id. A host
// cannot ask for another machine's names, nor keep a name its declaration
// no longer gives it.
func CheckCertificateGrant(p *DeclarationPayload, sendGen, appliedGen int64, id string, asked []string) (time.Duration, error) {
	if sendGen < appliedGen {
		return 0, fmt.Errorf("%w: generation %d is older than generation %d, the one applied: names come from the newest", ErrForbidden, sendGen, appliedGen)
	}
	names, lifetime, ok := CertificateNames(p, id)
	if !ok {
		return 0, fmt.Errorf("%w: generation %d declares no certificate %s for machine %s", ErrForbidden, sendGen, id, p.Machine)
	}
	given := map[string]bool{}
	for _, n := range names {
		given[n] = true
	}
	seen := map[string]bool{}
	for _, n := range asked {
		if !given[n] {
			return 0, fmt.Errorf("%w: certificate %s of machine %s is not given the name %q (it is given %s)",
				ErrForbidden, id, p.Machine, n, strings.Join(names, ", "))
		}
		seen[n] = true
	}
	if len(seen) != len(given) {
		return 0, fmt.Errorf("%w: certificate %s asks for %d of its %d names; ask for all: %s",
			ErrInvalid, id, len(seen), len(given), strings.Join(names, ", "))
	}
	return CertificateLifetime(lifetime)
}

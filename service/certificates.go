package service

import (
	"cmp"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"time"

	"mesh/auth"
	"mesh/meshca"
	"mesh/models"
)

// MachineCerts are the settings of machine certificates.
type MachineCerts struct {
	// CA issues them; nil: no machine certificates (a CSR is refused).
	CA *meshca.CA
	// Lifetime of an issued certificate (0: meshca.MachineLifetime);
	// Grace is how long past expiry one may still be renewed, once
	// (0: meshca.MachineGrace).
	Lifetime, Grace time.Duration
	// ControllerNames are the names the controller serves under (its
	// --advertise; meshca.LocalNames are added): no service certificate
	// names one.
	ControllerNames []string
}

// CertLifetime is the lifetime of an issued certificate.
func (c MachineCerts) CertLifetime() time.Duration {
	if c.Lifetime > 0 {
		return c.Lifetime
	}
	return meshca.MachineLifetime
}

// CertGrace is the renewal grace past expiry.
func (c MachineCerts) CertGrace() time.Duration {
	if c.Grace > 0 {
		return c.Grace
	}
	return meshca.MachineGrace
}

// CheckCSR checks a host's certificate request for machine name
// (meshca.CheckCSR) before anything is spent or issued; a refused one is
// audited with what it asked for when due says so (it returns how many
// went unaudited since the last record: the caller keeps an anonymous
// sender's refusals sparse), and answered as invalid input.
func (s *Service) CheckCSR(ctx context.Context, actor, name, csrPEM, from string, due func(auth.Row) (bool, int)) (*x509.CertificateRequest, error) {
	if s.Certs.CA == nil {
		return nil, models.Invalid("csr", "this controller issues no machine certificates")
	}
	csr, err := meshca.CheckCSR([]byte(csrPEM), name)
	var ce *meshca.CSRError
	if errors.As(err, &ce) {
		row := auth.Row{Actor: actor, Action: "certificate-refused", Target: "machine/" + name}
		if ok, since := due(row); ok {
			_ = s.Store.Audit(ctx, row.Actor, row.Action, row.Target, fmt.Sprintf("%s (from %s); nothing issued%s", ce.Reason, from, auth.Since(since)))
		}
		return nil, models.Invalid("csr", ce.Reason)
	}
	return csr, err
}

// IssueCertificate issues machine name's client certificate for a
// checked request, for its enrolment, and records it on the machine
// (audited); it returns the certificate as PEM. certOnly: issued at
// enrolment, the enrolment's bearer token alone is refused from then on.
func (s *Service) IssueCertificate(ctx context.Context, actor, name, enrolment string, csr *x509.CertificateRequest, why string, certOnly bool) ([]byte, *x509.Certificate, error) {
	cert, err := s.Certs.CA.IssueMachine(csr, name, enrolment, s.Store.Now(), s.Certs.CertLifetime())
	if err != nil {
		return nil, nil, err
	}
	if err := s.Store.RecordCertificate(ctx, actor, name, enrolment, cert.SerialNumber.Text(16), cert.NotBefore, cert.NotAfter, why, certOnly); err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw}), cert, nil
}

// CertInUse records a machine's certificate presented (Store.CertInUse):
// the one it replaces is refused for as long as any certificate issued
// before it could still be valid and renewed.
func (s *Service) CertInUse(ctx context.Context, name, enrolment string, cert *meshca.MachineIdentity) (string, error) {
	inUse, retired, err := s.Store.CertInUse(ctx, name, enrolment, cert.Serial, cert.NotBefore, cert.NotAfter, s.Store.Now().Add(s.Certs.CertLifetime()+s.Certs.CertGrace()))
	if err == nil && retired {
		err = fmt.Errorf("%w: machine %s's client certificate %s is neither the one its host presents nor its latest: a renewal replaced it, or it is a copy's; "+
			"a host presents its newest certificate (machine.pem)", models.ErrUnauthorized, name, cert.Serial)
	}
	return inUse, err
}

// RevokeMachine revokes a machine's identity (a person's act, audited):
// its state says revoked with the reason, and its token and certificates
// are refused on every instance at once.
func (s *Service) RevokeMachine(ctx context.Context, actor, name, reason string) (*models.Machine, error) {
	if reason == "" {
		reason = "revoked by " + actor
	}
	if len(reason) > 500 {
		return nil, models.Invalid("reason", "at most 500 characters")
	}
	return s.Store.RevokeMachine(ctx, actor, name, reason)
}

// maxRefusalReason is the most of a refused certificate's reason the
// audit keeps.
const maxRefusalReason = 1 << 10

// CertificateRefused records a client certificate refused in the request
// path: in the audit log always; on its machine (state revoked) only when
// the certificate is this CA's own for the machine's current enrolment and
// past its renewal grace, so a forged or stale certificate can never
// change what a machine's state says.
// CertificateRefusedRow is the audit row of a refused client certificate.
func CertificateRefusedRow(ce *meshca.ClientError) auth.Row {
	target := "machine/" + ce.Machine
	if ce.Machine == "" {
		target = "machine/?"
	}
	return auth.Row{Actor: "anonymous", Action: "certificate-refused", Target: target}
}

func (s *Service) CertificateRefused(ctx context.Context, ce *meshca.ClientError, from string) {
	row := CertificateRefusedRow(ce)
	// Its reason quotes what the certificate said: kept to a line.
	_ = s.Store.Audit(ctx, row.Actor, row.Action, row.Target,
		fmt.Sprintf("%s (from %s)", models.EscapeLogLine(ce.Reason, maxRefusalReason), from))
	if !ce.PastGrace || ce.Machine == "" {
		return
	}
	m, err := s.Store.Machine(ctx, ce.Machine)
	if err != nil || m.TokenID != ce.Enrolment || m.RevokedAt != nil {
		return
	}
	// Only the certificate its host uses (or, none used yet, the last
	// issued): one a renewal retired, or one issued and never presented,
	// presented past its grace by whoever kept a copy revoked a machine
	// whose host polled with a valid one, "past the renewal grace".
	if ce.Serial != cmp.Or(m.CertInUse, m.CertSerial) {
		return
	}
	_, _ = s.Store.RevokeMachine(ctx, "controller", ce.Machine, "its certificate "+ce.Reason)
}

// RecordOverdueRefusals writes the refusals counted since their key's
// last audit row and carried by no later one (auth.Refusals.Overdue).
func (s *Service) RecordOverdueRefusals(ctx context.Context) error {
	return s.refusals.RecordOverdue(ctx, s.Store.Audit)
}

// RecordPendingRefusals writes every refusal counted since its key's last
// row, however recent: what a stopping controller would otherwise lose.
func (s *Service) RecordPendingRefusals(ctx context.Context) error {
	return s.refusals.RecordPending(ctx, s.Store.Audit)
}

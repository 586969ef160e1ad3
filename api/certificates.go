package api

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"golang.org/x/time/rate"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/auth"
	"mesh/meshca"
	"mesh/models"
	"mesh/service"
)

// peerCertificates is the chain a client presented in its handshake (the
// listener requests one and verifies nothing: this path does).
func peerCertificates(c echo.Context) []*x509.Certificate {
	if st := c.Request().TLS; st != nil {
		return st.PeerCertificates
	}
	return nil
}

// verifyMachineCert verifies a presented machine certificate against the
// mesh CA: chain, client-auth usage, expiry (within the grace only for a
// renewal) and the revocation of its serial. Every refusal names the
// machine the certificate claims and is audited; one of this CA past its
// grace also marks its machine revoked.
func (s *Server) verifyMachineCert(c echo.Context, chain []*x509.Certificate, renewal bool) (*meshca.MachineIdentity, error) {
	certs := s.Service.Certs
	if certs.CA == nil {
		return nil, fmt.Errorf("%w: this controller takes no client certificates", models.ErrUnauthorized)
	}
	id, err := certs.CA.VerifyMachine(chain, s.Now(), certs.CertGrace())
	var ce *meshca.ClientError
	if errors.As(err, &ce) {
		// A certificate of another CA claims whatever name it likes: its
		// refusals are kept sparse by the address they come from, so
		// inventing a name for each is not a row for each.
		key := ce.Machine + "\x00verify"
		if ce.Forged {
			key = c.RealIP() + "\x00forged"
		}
		row := service.CertificateRefusedRow(ce)
		if ce.Forged {
			row.Target, row.Of = "address/"+c.RealIP(), "certificates of another CA from "+c.RealIP()+", whatever machine each claimed"
		}
		if due, since := s.refusals.Due(key, row); due {
			s.Service.CertificateRefused(c.Request().Context(), ce, c.RealIP()+auth.Since(since))
		}
		return nil, fmt.Errorf("%w: %v", models.ErrUnauthorized, ce)
	}
	if err != nil {
		return nil, err
	}
	if s.Auth.Revoked.Revoked(models.CertRevocationID(id.Serial)) {
		err := fmt.Errorf("%w: machine %s's client certificate %s was renewed once in its grace already; enrol the machine again",
			models.ErrUnauthorized, id.Machine, id.Serial)
		s.recordRefusal(c, id.Machine, "spent", err.Error())
		return nil, err
	}
	if s.Auth.Revoked.Revoked(models.CertRetiredID(id.Serial)) {
		err := fmt.Errorf("%w: machine %s's client certificate %s was replaced by a newer one, which its host has presented since; "+
			"a host presents its newest certificate (machine.pem)", models.ErrUnauthorized, id.Machine, id.Serial)
		s.recordRefusal(c, id.Machine, "replaced", err.Error())
		closeAfter(c)
		return nil, err
	}
	if id.Expired && !renewal {
		// On the record: a host that never renews (an older release, a
		// clock far off, renewals that keep failing) otherwise just goes
		// offline with nothing said.
		err := fmt.Errorf("%w: machine %s's client certificate expired at %s; the host renews it (POST /api/v1/host/certificate) until %s",
			models.ErrUnauthorized, id.Machine, id.NotAfter.UTC().Format(time.RFC3339), id.NotAfter.Add(certs.CertGrace()).UTC().Format(time.RFC3339))
		s.recordRefusal(c, id.Machine, "expired", err.Error())
		return nil, err
	}
	return id, nil
}

// recordRefusal audits a refused host credential, at most once a minute
// per machine and reason (auth.Refusals).
func (s *Server) recordRefusal(c echo.Context, machine, reason, detail string) {
	_ = s.refusals.Record(c.Request().Context(), s.Store.Audit, machine+"\x00"+reason,
		auth.Row{Actor: "anonymous", Action: "host-refused", Target: "machine/" + machine}, fmt.Sprintf("%s (from %s)", detail, c.RealIP()))
}

// recordThrottled puts a host's request refused by a limit on the record,
// once a minute per machine and kind, counting the rest.
func (s *Server) recordThrottled(c echo.Context, machine, action string, err error) {
	_ = s.refusals.Record(c.Request().Context(), s.Store.Audit, machine+"\x00"+action,
		auth.Row{Actor: "host:" + machine, Action: action, Target: "machine/" + machine}, err.Error())
}

type certificateRequest struct {
	CSR string `json:"csr"`
}

// CertificateView is a machine certificate just issued.
type CertificateView struct {
	Machine     string    `json:"machine"`
	Certificate string    `json:"certificate"`
	Serial      string    `json:"serial"`
	NotAfter    time.Time `json:"not_after"`
	// RenewAfter is when the host should ask again: two thirds of its life.
	RenewAfter time.Time `json:"renew_after"`
}

// renewCertificate issues a host a new client certificate for a new key:
// authenticated by its current certificate (an expired one within its
// grace, once: its handshake proved the old key), or by its bearer token
// when it has none yet (a host moving to certificates).
func (s *Server) renewCertificate(c echo.Context) error {
	if c.Request().TLS == nil && s.TLS {
		return fmt.Errorf("%w: certificates are issued over TLS only; use https://%s", models.ErrForbidden, c.Request().Host)
	}
	p, err := s.hostAuth(c, true)
	if err != nil {
		return err
	}
	if err := s.certLimit().take("machine " + p.Machine); err != nil {
		// A host renews at two thirds of its certificate's life; each
		// renewal is a signature, writes, and (once presented) its
		// predecessor's revocation row, which every instance reads again.
		s.recordThrottled(c, p.Machine, "certificate-refused", err)
		return err
	}
	var req certificateRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	if req.CSR == "" {
		return models.Invalid("csr", "required: a PEM CERTIFICATE REQUEST for mesh://machine/"+p.Machine)
	}
	ctx := c.Request().Context()
	actor := "host:" + p.Machine
	csr, err := s.Service.CheckCSR(ctx, actor, p.Machine, req.CSR, c.RealIP(), func(auth.Row) (bool, int) { return true, 0 })
	if err != nil {
		return err
	}
	why := "first certificate, asked with the host token"
	if p.cert == nil {
		// The host token asks only for a machine's first certificate (a
		// host moving to TLS): while one is valid, a new one is asked
		// with it, so a copy of host.json cannot get a certificate for a
		// key of its own beside the machine's.
		m, err := s.Store.Machine(ctx, p.Machine)
		if err != nil {
			return err
		}
		// Unless none was ever presented: the answer that carried the
		// first was lost (a network blip as a fleet moves to TLS stranded
		// the host, which had to enrol again), and the host asks again —
		// once a minute at most, so the token cannot mint certificates.
		// Once one was presented, never: a renewal's answer lost leaves
		// the host the one it presents, which renews.
		valid := m.CertSerial != "" && m.CertNotAfter != nil && s.Now().Before(*m.CertNotAfter)
		if m.CertInUse != "" {
			// Expired or not: an expired one renews with itself in its
			// grace, and past it the machine enrols again.
			err := fmt.Errorf("%w: machine %s holds a certificate its host has presented (serial %s): a new one is asked with it, not with the host token; "+
				"a host that lost machine.pem enrols again", models.ErrUnauthorized, p.Machine, m.CertInUse)
			s.recordRefusal(c, p.Machine, "bearer-certificate", err.Error())
			return err
		}
		if valid {
			issued := m.CertNotAfter.Add(-s.Service.Certs.CertLifetime())
			if again := issued.Add(time.Minute); s.Now().Before(again) {
				return &models.RetryAfterError{After: again.Sub(s.Now()), Err: fmt.Errorf(
					"%w: machine %s's first certificate (serial %s) was issued at %s and not presented yet; the host token asks again after %s",
					models.ErrTooManyRequests, p.Machine, m.CertSerial, issued.UTC().Format(time.RFC3339), again.UTC().Format(time.RFC3339))}
			}
			why = "first certificate, asked with the host token again: serial " + m.CertSerial + ", issued before, was never presented"
		}
	}
	if p.cert != nil {
		why = "renewal of " + p.cert.Serial
		if p.cert.Expired {
			// Until its successor is presented, which retires it
			// (CertInUse): spent at the renewal, a lost answer left the
			// host a certificate that could renew no more.
			why = "renewal in the grace of " + p.cert.Serial + ", expired " + p.cert.NotAfter.UTC().Format(time.RFC3339)
		}
	}
	pemCert, cert, err := s.Service.IssueCertificate(ctx, actor, p.Machine, p.enrolment, csr, why, false)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, CertificateView{Machine: p.Machine, Certificate: string(pemCert),
		Serial: cert.SerialNumber.Text(16), NotAfter: cert.NotAfter, RenewAfter: meshca.RenewAt(cert)})
}

type revokeRequest struct {
	Reason string `json:"reason"`
}

// revokeMachine revokes a machine's identity (admin): state revoked, its
// token and certificates refused on every instance, its parked polls
// closed (closeRevoked, told by the store).
func (s *Server) revokeMachine(c echo.Context) error {
	var req revokeRequest
	if c.Request().ContentLength != 0 {
		if err := decodeStrict(c, &req); err != nil {
			return err
		}
	}
	m, err := s.Service.RevokeMachine(c.Request().Context(), principal(c).Actor(), c.Param("name"), req.Reason)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.machineView(m))
}

// CloseRevoked ends the parked polls of machines whose enrolment was just
// revoked (here or, told by notification, on another instance), answering
// each 401 with the reason, so a revoked host holds no connection open.
func (s *Server) CloseRevoked(rs []models.Revocation) {
	for _, r := range rs {
		ps := s.Hub.TakeParkedOf(r.TokenID)
		if len(ps) == 0 {
			continue
		}
		resp := goneResponse()
		for _, x := range ps {
			pp := x.(*parkedPoll)
			if pp.state.CompareAndSwap(parkedWaiting, parkedDone) {
				s.finishParked(pp, resp)
			}
		}
	}
}

// goneResponse is a parked poll's answer when its machine was revoked or
// deleted while it waited.
func goneResponse() *answer {
	body, _ := json.Marshal(problemOf(fmt.Errorf("%w: this machine was revoked (or deleted)", models.ErrUnauthorized)))
	return &answer{status: http.StatusUnauthorized, headers: [][2]string{{"Content-Type", "application/problem+json"}}, body: body}
}

// certLimit bounds how often one machine is issued a client certificate:
// ten at once, then one each hundredth of a certificate's lifetime (7.2 h
// at the default 30 days). A host asks at two thirds of the lifetime; a
// host credential asking without end was ~300 certificates a second,
// each renewed and presented leaving a revocation row kept for the
// lifetime and read at every instance's heartbeat.
func (s *Server) certLimit() *addressLimiter {
	s.certLimitOnce.Do(func() {
		s.certLimiter = newAddressLimiter("certificates", rate.Every(max(s.Service.Certs.CertLifetime()/100, time.Millisecond)), 10)
	})
	return s.certLimiter
}

// RecordOverdueRefusals writes the refusals counted since their key's
// last audit row and carried by no later one (auth.Refusals.Overdue).
func (s *Server) RecordOverdueRefusals(ctx context.Context) error {
	return s.refusals.RecordOverdue(ctx, s.Store.Audit)
}

// RecordPendingRefusals writes every refusal counted since its key's last
// row, however recent: what a stopping controller would otherwise lose.
func (s *Server) RecordPendingRefusals(ctx context.Context) error {
	return s.refusals.RecordPending(ctx, s.Store.Audit)
}

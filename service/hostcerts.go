package service

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"mesh/auth"
	"mesh/meshca"
	"mesh/models"
)

// IssuedCertificate is a service certificate signed for a machine: the
// chain (leaf, then the mesh CA) as PEM, and when it expires.
type IssuedCertificate struct {
	Chain    string    `json:"chain"`
	NotAfter time.Time `json:"not_after"`
	Serial   string    `json:"serial"`
}

// IssueServiceCertificate signs a CSR a machine's host made for one of its
// certificate resources, for the names the declaration of the named send
// gives that machine and no others. Refusals are audited (a host asking
// for a name it was not given is something an operator must see); so is
// every certificate issued. The key stays on the machine: only the CSR's
// public key is seen here, and nothing of it is stored.
func (s *Service) IssueServiceCertificate(ctx context.Context, ca *meshca.CA, machineID int64, machine string, req models.CertificateRequest) (*IssuedCertificate, error) {
	if ca == nil {
		return nil, fmt.Errorf("%w: this controller holds no mesh CA to sign with", models.ErrConflict)
	}
	actor, target := "host:"+machine, "machine/"+machine
	refuse := func(err error) (*IssuedCertificate, error) {
		// On the record, but at most a row a minute for a machine (with
		// how many more since): a host repeating a refused request must
		// not write the store full of its refusals.
		if errors.Is(err, models.ErrForbidden) || errors.Is(err, models.ErrInvalid) {
			if aerr := s.refusals.Record(ctx, s.Store.Audit, machine+"\x00service-certificate",
				auth.Row{Actor: actor, Action: "service-certificate-refused", Target: target}, models.Clip(req.Resource, 130)+": "+err.Error()); aerr != nil {
				return nil, aerr
			}
		}
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return refuse(err)
	}
	csr, err := meshca.ParseCSR([]byte(req.CSR))
	if err != nil {
		return refuse(models.Invalid("csr", err.Error()))
	}
	g, err := s.Store.CertificateGrantOf(ctx, machineID, req.Send)
	if err != nil {
		return refuse(err)
	}
	lifetime, err := models.CheckCertificateGrant(g.Declaration, g.SendGen, g.AppliedGen, req.Resource, csr.DNSNames)
	if err != nil {
		return refuse(err)
	}
	// Every instance's names, not only this one's: a replica asked for
	// another's name signed what that one refused.
	others, err := s.Store.AdvertisedNames(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.Certs.notTheControllers(csr.DNSNames, others...); err != nil {
		return refuse(err)
	}
	if err := s.serviceCerts.take(machine+"\x00"+req.Resource, lifetime, time.Now()); err != nil {
		// Not audited here: the API's limit records it, once a minute.
		return nil, err
	}
	chain, leaf, err := ca.IssueService(csr, csr.DNSNames, s.Store.Now(), lifetime)
	if err != nil {
		return nil, err
	}
	out := &IssuedCertificate{Chain: string(chain), NotAfter: leaf.NotAfter.UTC(), Serial: leaf.SerialNumber.Text(16)}
	if err := s.Store.Audit(ctx, actor, "service-certificate", target, fmt.Sprintf("%s: %s, serial %s, until %s",
		req.Resource, strings.Join(leaf.DNSNames, ", "), out.Serial, out.NotAfter.Format(time.RFC3339))); err != nil {
		return nil, err
	}
	return out, nil
}

// certPace bounds how often one certificate resource of a machine is
// signed: three at once, then one each third of its lifetime. A host
// renews at two thirds, so a host that follows the protocol is never
// refused, whatever the lifetime (at least 10 s), while a host credential
// asking without end gets a certificate — a signature and an audit row —
// a third of a lifetime at a time per resource its declaration gives.
type certPace struct {
	mu sync.Mutex
	by map[string]*rate.Limiter
}

// maxPaced bounds the resources remembered; past it they start over.
const maxPaced = 100_000

func (p *certPace) take(key string, lifetime time.Duration, now time.Time) error {
	every := rate.Every(max(lifetime/3, time.Second))
	p.mu.Lock()
	if p.by == nil || len(p.by) >= maxPaced {
		p.by = map[string]*rate.Limiter{}
	}
	lim := p.by[key]
	if lim == nil {
		lim = rate.NewLimiter(every, 3)
		p.by[key] = lim
	} else if lim.Limit() != every {
		lim.SetLimit(every) // the declaration changed its lifetime
	}
	p.mu.Unlock()
	r := lim.ReserveN(now, 1)
	if d := r.DelayFrom(now); d > 0 {
		r.Cancel()
		_, resource, _ := strings.Cut(key, "\x00")
		return &models.RetryAfterError{After: d, Err: fmt.Errorf("%w: %s was issued three times within a third of its lifetime (%s); try again in %s",
			models.ErrTooManyRequests, resource, lifetime, models.DurationWords(d))}
	}
	return nil
}

// coversName says whether wildcard w ("*.a.b") covers name n ("x.a.b"):
// one label in place of the star, as a TLS client matches it.
func coversName(w, n string) bool {
	rest, ok := strings.CutPrefix(w, "*.")
	_, parent, dot := strings.Cut(n, ".")
	return ok && dot && parent == rest
}

// notTheControllers refuses a service certificate any of whose names (a
// wildcard included, or a name under a wildcard the controller is
// advertised as) is one the controller serves under (this instance's, and
// the others' given): signed by the
// same mesh CA, with server auth, it would let whoever wrote the manifest
// pose as the controller to the hosts and to meshctl, which trust that CA
// (an operator's module could capture the admin's password at login).
func (c MachineCerts) notTheControllers(names []string, others ...string) error {
	served := append(append(append([]string{}, c.ControllerNames...), others...), meshca.LocalNames...)
	for _, n := range names {
		n = strings.TrimSuffix(strings.ToLower(n), ".")
		for _, r := range served {
			r = strings.TrimSuffix(strings.ToLower(r), ".")
			if n == r || coversName(n, r) || coversName(r, n) {
				return fmt.Errorf("%w: %s is a name the controller serves under (--advertise); a service certificate may not name it", models.ErrForbidden, n)
			}
		}
	}
	return nil
}

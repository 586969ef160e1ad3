package controller

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/acme"
	"golang.org/x/crypto/acme/autocert"

	"mesh/meshca"
	"mesh/store"
)

// caID is the one mesh CA's row in tls_keys.
const caID = "ca1"

// ticketPeriod is how long one session ticket key issues tickets; the one
// before it still opens them, so a ticket lives one to two periods.
const ticketPeriod = 24 * time.Hour

// IsLoopback says whether a listen address can be reached only from this
// machine: 127.0.0.0/8, ::1 or localhost. An empty host (":8080") or an
// unspecified one (0.0.0.0, ::) listens everywhere.
func IsLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		host = listen
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// servesTLS decides whether the listener serves TLS: on loopback only
// with --tls (a person's first minutes stay two commands); anywhere else
// always, unless --insecure-http says otherwise, which is warned of on
// every start.
func servesTLS(cfg Config) (bool, error) {
	on, err := decideTLS(cfg)
	if err == nil && !on && !cfg.HostBearerUntil.IsZero() {
		// The window keeps plain HTTP open for hosts beside TLS; without
		// TLS it would mean nothing, and its date would pass unnoticed.
		return false, errors.New("--host-bearer-until: this controller serves plain HTTP, so there is no move to TLS to wait for; give it with TLS on (--tls on loopback, or without --insecure-http)")
	}
	return on, err
}

func decideTLS(cfg Config) (bool, error) {
	switch {
	case cfg.TLS && cfg.InsecureHTTP:
		return false, errors.New("--tls and --insecure-http: give one")
	case (cfg.TLSCertFile == "") != (cfg.TLSKeyFile == ""):
		return false, errors.New("--tls-cert and --tls-key go together")
	case cfg.InsecureHTTP && cfg.TLSCertFile != "":
		return false, errors.New("--insecure-http and --tls-cert: give one")
	case cfg.ACME.on() && cfg.TLSCertFile != "":
		return false, errors.New("--acme-domain and --tls-cert: give one")
	case cfg.ACME.on() && cfg.InsecureHTTP:
		return false, errors.New("--acme-domain and --insecure-http: give one")
	case IsLoopback(cfg.Listen):
		return cfg.TLS || cfg.TLSCertFile != "" || cfg.ACME.on(), nil
	case cfg.InsecureHTTP:
		cfg.Log.Warn("serving plain HTTP on an address that is not loopback (--insecure-http): join tokens, host tokens, "+
			"sessions, variables and artifacts travel in the clear; drop --insecure-http to serve TLS under the mesh CA",
			"listen", cfg.Listen)
		return false, nil
	}
	return true, nil
}

// loadCA reads the mesh CA from the store, making it on the first start;
// every replica gets the same one.
func loadCA(ctx context.Context, st *store.Store, cfg Config) (*meshca.CA, error) {
	certDER, keyDER, err := meshca.New(time.Now())
	if err != nil {
		return nil, err
	}
	k, err := st.EnsureTLSKey(ctx, caID, store.TLSCA, certDER, keyDER)
	if err != nil {
		return nil, keyError(fmt.Errorf("mesh CA: %w", err), cfg)
	}
	return meshca.Parse(k.Certificate, k.PrivateKey)
}

// serving holds what the TLS listener presents: the serving certificate the
// mesh CA issued (renewed in place) and, when given, the operator's own.
type serving struct {
	ca       *meshca.CA
	names    []string // --advertise
	lifetime time.Duration
	mesh     atomic.Pointer[tls.Certificate]
	// operator is --tls-cert/--tls-key, presented to a client whose SNI it
	// covers and that is none of the mesh's names.
	operator *tls.Certificate
	// acme answers its domains instead of operator (--acme-domain).
	acme      *autocert.Manager
	meshNames map[string]bool
	conf      *tls.Config
	// operatorConf answers clients of the operator's name: no client
	// certificate asked; ticket keys are conf's.
	operatorConf *tls.Config
}

func newServing(ca *meshca.CA, cfg Config) (*serving, error) {
	s := &serving{ca: ca, names: cfg.Advertise, lifetime: cfg.CertLifetime, meshNames: map[string]bool{}}
	if s.lifetime <= 0 {
		s.lifetime = meshca.ServingLifetime
	}
	for _, n := range append(append([]string{}, cfg.Advertise...), meshca.LocalNames...) {
		s.meshNames[strings.ToLower(n)] = true
	}
	if cfg.TLSCertFile != "" {
		op, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		s.operator = &op
	}
	if cfg.ACME.on() {
		m, err := acmeManager(cfg)
		if err != nil {
			return nil, err
		}
		s.acme = m
	}
	if err := s.renew(time.Now()); err != nil {
		return nil, err
	}
	// Hosts present machine certificates; the handshake asks for one but
	// judges none (RequestClientCert), so the request path can refuse a
	// bad one with a problem that names the machine and record it. A
	// client asking for the operator's name (a browser, the dashboard) is
	// asked for no certificate: it would only be offered a picker.
	s.operatorConf = &tls.Config{MinVersion: tls.VersionTLS12, NextProtos: meshca.NextProtos, GetCertificate: s.certificate}
	if s.acme != nil {
		// The ACME CA's TLS-ALPN-01 challenge is answered on this listener.
		s.operatorConf.NextProtos = append(slices.Clone(meshca.NextProtos), acme.ALPNProto)
	}
	s.conf = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     meshca.NextProtos,
		GetCertificate: s.certificate,
		ClientAuth:     tls.RequestClientCert,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if s.isOperatorName(hello.ServerName) {
				return s.operatorConf, nil
			}
			return nil, nil
		},
	}
	return s, nil
}

// renew issues a fresh serving certificate.
func (s *serving) renew(now time.Time) error {
	c, err := s.ca.IssueServing(s.names, now, s.lifetime)
	if err != nil {
		return fmt.Errorf("issuing the serving certificate: %w", err)
	}
	s.mesh.Store(c)
	return nil
}

// due says whether the serving certificate is past two thirds of its life.
func (s *serving) due(now time.Time) bool {
	leaf := s.mesh.Load().Leaf
	return now.After(leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3))
}

// certificate chooses by SNI: the operator's certificate for a name it
// covers that is not one of the mesh's (the dashboard's public name), the
// mesh CA's for everything else — the advertised names hosts use, an IP
// address, no SNI at all.
func (s *serving) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	if s.isOperatorName(hello.ServerName) {
		if s.acme != nil {
			return s.acme.GetCertificate(hello)
		}
		return s.operator, nil
	}
	return s.mesh.Load(), nil
}

// isOperatorName says whether the operator's certificate answers name.
func (s *serving) isOperatorName(name string) bool {
	if s.acme != nil {
		return name != "" && !s.meshNames[strings.ToLower(name)] && s.acme.HostPolicy(context.Background(), name) == nil
	}
	return s.operator != nil && name != "" && !s.meshNames[strings.ToLower(name)] &&
		s.operator.Leaf != nil && s.operator.Leaf.VerifyHostname(name) == nil
}

// ticketKeys reads (or makes) the session ticket keys of this period and
// the one before, shared by every replica through the store, so a session
// resumes across a restart and on another replica. The first encrypts new
// tickets; both open them.
func ticketKeys(ctx context.Context, st *store.Store, now time.Time) ([][32]byte, error) {
	p := now.Unix() / int64(ticketPeriod/time.Second)
	var keys [][32]byte
	for _, period := range []int64{p, p - 1} {
		var fresh [32]byte
		if _, err := rand.Read(fresh[:]); err != nil {
			return nil, err
		}
		k, err := st.EnsureTLSKey(ctx, "ticket-"+strconv.FormatInt(period, 10), store.TLSTicket, nil, fresh[:])
		if err != nil {
			return nil, fmt.Errorf("session ticket key: %w", err)
		}
		if len(k.PrivateKey) != 32 {
			return nil, fmt.Errorf("session ticket key %s: %d bytes, want 32", k.ID, len(k.PrivateKey))
		}
		keys = append(keys, [32]byte(k.PrivateKey))
	}
	return keys, nil
}

// refreshTickets sets this period's ticket keys and prunes old ones.
func (c *Controller) refreshTickets(ctx context.Context) error {
	now := time.Now()
	keys, err := ticketKeys(ctx, c.Store, now)
	if err != nil {
		return err
	}
	c.tls.conf.SetSessionTicketKeys(keys)
	return c.Store.PruneTLSKeys(ctx, store.TLSTicket, now.Add(-3*ticketPeriod))
}

// tlsUpkeep renews the serving certificate at two thirds of its life and
// moves the ticket keys on with the period.
func (c *Controller) tlsUpkeep(ctx context.Context) {
	every := min(time.Hour, c.tls.lifetime/10)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.tls.due(time.Now()) {
				if err := c.tls.renew(time.Now()); err != nil {
					c.cfg.Log.Error("renewing the serving certificate", "err", err)
				} else {
					c.cfg.Log.Info("serving certificate renewed", "not_after", c.tls.mesh.Load().Leaf.NotAfter)
				}
			}
			if err := c.refreshTickets(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("session ticket keys", "err", err)
			}
		}
	}
}

// enrolURL is the URL hosts enrol with: the first advertised name, else
// the listen address when it names one; empty when it does not (":8443",
// "0.0.0.0:8443"), and the API then takes the request's own.
func enrolURL(cfg Config, tlsOn bool, addr net.Addr) string {
	scheme := "http"
	if tlsOn {
		scheme = "https"
	}
	_, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	host := ""
	if len(cfg.Advertise) > 0 {
		host = cfg.Advertise[0]
	} else if h, _, err := net.SplitHostPort(cfg.Listen); err == nil {
		if ip := net.ParseIP(h); h != "" && (ip == nil || !ip.IsUnspecified()) {
			host = h
		}
	}
	if host == "" {
		return ""
	}
	return scheme + "://" + net.JoinHostPort(host, port)
}

// serverErrors carries net/http's own error log into the controller's:
// failed TLS handshakes at debug (a host enrolling makes one on purpose
// when it reads the chain to find its pinned CA, and scanners make many),
// everything else as a warning.
type serverErrors struct{ log *slog.Logger }

func (w serverErrors) Write(p []byte) (int, error) {
	msg := strings.TrimSpace(string(p))
	if strings.Contains(msg, "TLS handshake error") {
		w.log.Debug(msg)
	} else {
		w.log.Warn(msg)
	}
	return len(p), nil
}

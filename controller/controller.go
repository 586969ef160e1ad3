// Package controller wires a running mesh-controller: store, keys, hub,
// send writer, API and the instance's lifecycle. cmd/mesh-controller and
// the tests that run a controller in-process both start it from here.
package controller

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/labstack/echo/v4"

	"mesh"
	"mesh/api"
	"mesh/auth"
	"mesh/conns"
	"mesh/hub"
	"mesh/meshca"
	"mesh/models"
	"mesh/service"
	"mesh/store"
	"mesh/version"
	"mesh/web"
)

// Config is a controller's configuration.
type Config struct {
	Listen      string
	DataDir     string
	DatabaseURL string
	// Rules are the state thresholds (--offline-after, --unhealthy-after);
	// zero fields take the defaults.
	Rules models.StateRules
	// StoreTimeout bounds how long a request waits on the store before it
	// answers 503 (0: 30 s); long polls wait on the hub, not the store.
	StoreTimeout time.Duration
	// FlushEvery is how often last-seen times are written.
	FlushEvery time.Duration
	// ResyncEvery is how often, on PostgreSQL, an instance re-reads every
	// machine's generation: the bound on a change missed by a lost
	// notification or a dropped listener connection.
	ResyncEvery time.Duration
	// RolloutEvery is how often host rollouts are stepped.
	RolloutEvery time.Duration
	// HeartbeatEvery is how often the instance row is touched (and the
	// refused tokens read again); DefaultHeartbeatEvery if 0.
	HeartbeatEvery time.Duration
	// KeepSends is how long sends, reports and declarations are kept
	// (--keep-sends; 0: models.DefaultKeepSends, below 0: for ever);
	// RetentionEvery is how often retention runs (0: 10 minutes).
	KeepSends      time.Duration
	RetentionEvery time.Duration
	// DrainTimeout bounds a graceful stop.
	DrainTimeout time.Duration
	Log          *slog.Logger
	// Out is where the first start prints its one-time way in.
	Out io.Writer

	// MaxConns caps open connections (conns.Limit); 0: no cap.
	MaxConns int

	// KeyFile names the file of the key that seals the signing keys at
	// rest; Key is that key itself, as text (MESH_KEY). At most one is set;
	// with neither, the keys are stored in plaintext.
	KeyFile string
	Key     string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For (the
	// client's address, RealIP) and X-Forwarded-Proto/-Host are believed.
	TrustedProxies []netip.Prefix
	// MaxUpload caps an upload's body (api.Server.MaxUpload); 0: the default.
	MaxUpload int64

	// TLS serves TLS on a loopback address too; elsewhere TLS is the
	// default and InsecureHTTP (warned of at every start) turns it off.
	TLS          bool
	InsecureHTTP bool
	// Advertise are the names and addresses hosts reach this controller
	// by (--advertise): the serving certificate the mesh CA issues names
	// them, with localhost, 127.0.0.1 and ::1; the first is the URL a
	// join token's command gives.
	Advertise []string
	// CertLifetime is the serving certificate's (0: 30 days); it is
	// renewed at two thirds of it.
	CertLifetime time.Duration
	// TLSCertFile and TLSKeyFile are an operator's certificate (a public
	// CA's) for the dashboard and API, presented to clients whose SNI it
	// covers and that is not an advertised name; hosts keep the mesh CA.
	TLSCertFile, TLSKeyFile string
	// ACME gets the dashboard's and API's certificate from an ACME CA
	// instead of TLSCertFile (acme.go).
	ACME ACME
	// MachineCertLifetime is a machine client certificate's (0: 30 days),
	// renewed by its host at two thirds; MachineCertGrace is how long
	// past expiry an offline host may still renew it, once (0: 7 days).
	MachineCertLifetime, MachineCertGrace time.Duration
	// HostBearerUntil, on a controller serving TLS, keeps the host
	// protocol served over plain HTTP on the same port, to hosts without a
	// certificate, until then; after it such hosts are refused with how to
	// move. Zero: TLS only, and bearer-only hosts are never cut off.
	HostBearerUntil time.Time

	// StoreOpened, when set, is given the store once it is open and
	// migrated, before the controller begins any work on it. Tests arm
	// hooks on the store's gorm callbacks there: a callback registered or
	// removed while the controller's workers query races their reads of
	// gorm's callback list.
	StoreOpened func(*store.Store)
}

// Controller is a running controller instance.
type Controller struct {
	cfg      Config
	Store    *store.Store
	Server   *api.Server
	Hub      *hub.Hub
	Echo     *echo.Echo
	Instance string
	Addr     net.Addr
	// CA is the mesh CA; TLS says the listener serves TLS.
	CA  *meshca.CA
	TLS bool

	tls *serving // nil without TLS

	ln      net.Listener
	cancel  context.CancelFunc
	done    chan struct{}
	workers sync.WaitGroup
}

// OpenStore opens and migrates the store the config names.
func OpenStore(ctx context.Context, cfg Config, exclusive bool) (*store.Store, error) {
	ring, err := loadKeyring(cfg)
	if err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, store.Config{DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL, Exclusive: exclusive, Keyring: ring})
	if err != nil {
		return nil, err
	}
	applied, err := st.Migrate(ctx)
	if err != nil {
		st.Close()
		return nil, err
	}
	if len(applied) > 0 && cfg.Log != nil {
		// An upgrade's migrations are said where its operator looks.
		cfg.Log.Info("store migrated", "applied", applied)
	}
	return st, nil
}

// Start opens the store, prepares keys, loads the hub and starts serving.
func Start(ctx context.Context, cfg Config) (*Controller, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.FlushEvery == 0 {
		cfg.FlushEvery = 30 * time.Second
	}
	if cfg.ResyncEvery == 0 {
		cfg.ResyncEvery = 30 * time.Second
	}
	if cfg.RolloutEvery == 0 {
		cfg.RolloutEvery = time.Second
	}
	if cfg.HeartbeatEvery == 0 {
		cfg.HeartbeatEvery = DefaultHeartbeatEvery
	}
	if cfg.DrainTimeout == 0 {
		cfg.DrainTimeout = 10 * time.Second
	}
	if cfg.KeepSends == 0 {
		cfg.KeepSends = models.DefaultKeepSends
	}
	if cfg.RetentionEvery == 0 {
		cfg.RetentionEvery = 10 * time.Minute
	}
	st, err := OpenStore(ctx, cfg, true)
	if err != nil {
		return nil, err
	}
	if cfg.StoreOpened != nil {
		cfg.StoreOpened(st)
	}
	c, err := start(ctx, cfg, st)
	if err != nil {
		st.Close()
		return nil, err
	}
	return c, nil
}

func start(ctx context.Context, cfg Config, st *store.Store) (_ *Controller, err error) {
	declKey, tokKey, err := signingKeys(ctx, st, cfg)
	if err != nil {
		return nil, err
	}
	tlsOn, err := servesTLS(cfg)
	if err != nil {
		return nil, err
	}
	ca, err := loadCA(ctx, st, cfg)
	if err != nil {
		return nil, err
	}
	var tlsServing *serving
	if tlsOn {
		if tlsServing, err = newServing(ca, cfg); err != nil {
			return nil, err
		}
		keys, err := ticketKeys(ctx, st, time.Now())
		if err != nil {
			return nil, keyError(err, cfg)
		}
		tlsServing.conf.SetSessionTicketKeys(keys)
	}
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	inst := "ctl-" + hex.EncodeToString(b)
	_, knownSchema, err := st.SchemaVersion(ctx)
	if err != nil {
		return nil, err
	}
	advertised, _ := json.Marshal(cfg.Advertise)
	if len(cfg.Advertise) == 0 {
		advertised = nil
	}
	if err := st.RegisterInstance(ctx, &models.Instance{ID: inst, Version: version.Version, Build: version.BuildNumber(),
		State: models.InstanceStarting, StoreSchema: knownSchema, Advertise: string(advertised)}); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			// A start that failed (its address taken, say) served nothing:
			// it is not listed as an instance gone silent.
			_ = st.SetInstanceState(context.WithoutCancel(ctx), inst, models.InstanceStopped)
		}
	}()
	signer := store.NewKeySigner(declKey)
	tokSigner := store.NewKeySigner(tokKey)
	hub := hub.New(st, signer, inst, cfg.Log)
	st.OnBumped(hub.Bumped)
	if err := noteOlderInstances(ctx, st, hub, cfg.Log); err != nil {
		return nil, err
	}
	// Polls are answered only once the listener runs and the cache is
	// loaded from the store, in that order, so no change falls between.
	listenCtx, stopListening := context.WithCancel(context.WithoutCancel(ctx))
	listening := make(chan struct{})
	revoked := auth.NewRevocations()
	st.OnRevoked(revoked.Add)
	st.OnHostInfo(hub.ForgetHostInfo)
	// After a reconnect the refused set is read again before the hub: a
	// poll the reload wakes must find a revocation missed meanwhile. Each
	// is tried until it succeeds: a failed read left a revocation missed
	// in the gap unknown here, on PostgreSQL, until a restart.
	reconnected := func() {
		untilDone(listenCtx, cfg.Log, "reading revocations after the listener reconnected", func(ctx context.Context) error {
			return st.AnnounceRevocations(ctx, revoked.Revoked)
		})
		untilDone(listenCtx, cfg.Log, "reloading machines after the listener reconnected", hub.Load)
	}
	go st.Listen(listenCtx, cfg.DatabaseURL, hub.Bumped, reconnected, listening, cfg.Log)
	select {
	case <-listening:
	case <-time.After(30 * time.Second):
		stopListening()
		return nil, errors.New("the PostgreSQL listener did not start within 30s")
	}
	if err := hub.Load(ctx); err != nil {
		stopListening()
		return nil, err
	}
	if err := st.AnnounceRevocations(ctx, revoked.Revoked); err != nil {
		stopListening()
		return nil, err
	}
	sends := api.NewSendWriter(st)
	authority := &auth.Authority{KeyID: tokSigner.ID, Priv: tokSigner.Priv, Now: time.Now, Revoked: revoked, Used: auth.NewLastUse()}
	svc := &service.Service{Store: st, Signer: signer, Auth: authority, Throttle: auth.NewThrottle(), ControllerBuild: version.BuildNumber(),
		Certs: service.MachineCerts{CA: ca, Lifetime: cfg.MachineCertLifetime, Grace: cfg.MachineCertGrace, ControllerNames: cfg.Advertise}}
	srv := api.NewServer(st, hub, sends, authority, signer, inst, cfg.Log, mesh.OpenAPI)
	srv.ManifestSchema = mesh.ManifestSchema
	srv.HostUnit = mesh.HostUnit
	srv.Service = svc
	// A revoked (or deleted) machine's parked polls close on every instance.
	// After revoked.Add (registered above, and hooks run in order): a poll
	// that parks after CloseRevoked looked finds its enrolment refused.
	st.OnRevoked(srv.CloseRevoked)
	rules := models.DefaultStateRules
	if cfg.Rules.OfflineAfter > 0 {
		rules.OfflineAfter = cfg.Rules.OfflineAfter
	}
	if cfg.Rules.UnhealthyAfter > 0 {
		rules.UnhealthyAfter = cfg.Rules.UnhealthyAfter
	}
	st.Rules, srv.Rules = rules, rules
	if cfg.StoreTimeout > 0 {
		srv.StoreTimeout = cfg.StoreTimeout
	}
	srv.Now = st.Now
	srv.MaxUpload = cfg.MaxUpload
	srv.Behind = &models.Behind{}
	lookBehind(ctx, st, srv.Behind, cfg.Log)
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.IPExtractor = web.RealIP(cfg.TrustedProxies)
	e.Use(web.SecurityHeaders)
	srv.Register(e)
	dash := web.NewServer(st, hub, authority, signer, inst, cfg.Log)
	dash.Behind = srv.Behind
	dash.TrustedProxies = cfg.TrustedProxies
	dash.Service = svc
	dash.Rules = rules
	dash.KeepSends = max(cfg.KeepSends, 0)
	dash.Register(e)

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		stopListening()
		if errors.Is(err, syscall.EADDRINUSE) {
			return nil, fmt.Errorf("listen on %s: the address is in use (another controller, or another program): stop it, or give another --listen", cfg.Listen)
		}
		return nil, fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	// The first admin is made once the address is ours: a start that
	// cannot listen must not spend the one-time password.
	if err := firstUser(ctx, st, cfg); err != nil {
		ln.Close()
		stopListening()
		return nil, err
	}
	if cfg.MaxConns > 0 {
		lim := conns.Limit(ln, cfg.MaxConns, conns.ProbeReserve)
		// Past the cap, idle connections make room for new ones.
		lim.Track(e.Server)
		srv.Conns = lim
		ln = lim
	}
	plain := tlsOn && !cfg.HostBearerUntil.IsZero()
	switch {
	case plain:
		// Hosts enrolled over plain HTTP keep their URL while they move.
		ln = newSniffListener(ln, tlsServing.conf)
		cfg.Log.Warn("serving the host protocol over plain HTTP too, beside TLS, to hosts without a certificate (--host-bearer-until)",
			"until", cfg.HostBearerUntil.UTC().Format(time.RFC3339))
	case tlsOn:
		// The cap sits under TLS: a refused connection costs no handshake.
		ln = tls.NewListener(ln, tlsServing.conf)
	}
	srv.TLS = tlsOn
	if tlsOn {
		srv.Plain = api.PlainHosts{On: plain, Until: cfg.HostBearerUntil}
	}
	srv.Enrolment = api.Enrolment{CAPin: ca.Pin(), CAPEM: ca.PEM(), URL: enrolURL(cfg, tlsOn, ln.Addr())}
	srv.ServiceCA = ca // signs services' certificates (schema 2)
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c := &Controller{cfg: cfg, Store: st, Server: srv, Hub: hub, Echo: e, Instance: inst, Addr: ln.Addr(), ln: ln,
		CA: ca, TLS: tlsOn, tls: tlsServing,
		cancel: func() { cancel(); stopListening() }, done: make(chan struct{})}
	srv.Kept = conns.NewKept(ln.Addr(), 16384)
	srv.Start(runCtx)
	if tlsOn {
		c.workers.Add(1)
		go func() { defer c.workers.Done(); c.tlsUpkeep(runCtx) }()
	}
	c.workers.Add(4)
	go func() { defer c.workers.Done(); c.rollouts(runCtx) }()
	resync := time.Duration(0)
	if st.Dialect() == store.Postgres {
		resync = cfg.ResyncEvery
	}
	go func() { defer c.workers.Done(); hub.Run(runCtx, cfg.FlushEvery, resync) }()
	go func() { defer c.workers.Done(); sends.Run(runCtx) }()
	go func() { defer c.workers.Done(); c.heartbeat(runCtx) }()
	if cfg.KeepSends > 0 {
		c.workers.Add(1)
		go func() { defer c.workers.Done(); c.retention(runCtx) }()
	}
	conns.ServerTimeouts(e.Server)
	e.Server.ErrorLog = log.New(serverErrors{cfg.Log}, "", 0)
	// Answered parked polls' connections come back through srv.Kept and
	// are served again; Shutdown closes it with ln.
	go func() {
		if err := e.Server.Serve(srv.Kept); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Log.Error("serve kept connections", "err", err)
		}
	}()
	go func() {
		defer close(c.done)
		if err := e.Server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			cfg.Log.Error("serve", "err", err)
		}
	}()
	if err := st.SetInstanceState(ctx, inst, models.InstanceServing); err != nil {
		return nil, err
	}
	cfg.Log.Info("serving", "instance", inst, "listen", ln.Addr().String(), "tls", tlsOn, "ca_pin", ca.Pin(), "store", st.Dialect(), "version", version.String())
	return c, nil
}

// noteOlderInstances tells the hub whether an instance of a build that
// knows no batch envelopes serves from this store (a rolling upgrade of
// the controllers): while one does, every declaration composed here is
// signed with its single-signature envelope too, because that instance
// sends the stored one as it is. Looked at before this instance serves
// and at every heartbeat.
func noteOlderInstances(ctx context.Context, st *store.Store, h *hub.Hub, log *slog.Logger) error {
	older, err := st.OlderInstancesServing(ctx, st.Now().Add(-models.InstanceSilentAfter))
	if err != nil {
		return err
	}
	if h.SetSingleForAll(older) {
		if older {
			log.Info("an instance of a build before batch envelopes serves from this store: every declaration is signed with its single envelope too")
			// And every current one stored before: that instance sends
			// the stored single envelope as it is, empty for those.
			n, err := st.SealSingles(ctx, h.Signer)
			if err != nil {
				h.SetSingleForAll(false) // tried again at the next heartbeat
				return err
			}
			log.Info("signed the single envelope of the current declarations stored without one", "declarations", n)
		} else {
			log.Info("no instance of a build before batch envelopes serves from this store any more")
		}
	}
	return nil
}

// DefaultHeartbeatEvery is the heartbeat's period when the config gives
// none.
const DefaultHeartbeatEvery = 15 * time.Second

// loadRevocations reads the store's refused tokens into the set checked on
// every request.
// lookBehind says whether the store's schema is newer than this build
// knows, logging when that changes: at start, and at every heartbeat, for
// a newer build may migrate the store while this one serves.
func lookBehind(ctx context.Context, st *store.Store, behind *models.Behind, log *slog.Logger) {
	have, known, err := st.SchemaVersion(ctx)
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("reading the store's schema", "err", err)
		}
		return
	}
	why := ""
	if have > known {
		why = fmt.Sprintf("this controller (build %s) knows store schema %d; the store is at %d, migrated by a newer build", version.Build, known, have)
	}
	if why != behind.Why() && why != "" {
		log.Warn("behind the store: serving what this build can", "known_schema", known, "store_schema", have)
	}
	behind.Set(why)
}

// untilDone calls f until it succeeds or ctx ends, waiting longer after
// each failure (at most 10 s), each logged.
func untilDone(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) {
	wait := 100 * time.Millisecond
	for {
		err := f(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		log.Warn(what, "err", err, "again in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 10*time.Second)
	}
}

func (c *Controller) heartbeat(ctx context.Context) {
	t := time.NewTicker(c.cfg.HeartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Store.Heartbeat(ctx, c.Instance); err != nil {
				c.cfg.Log.Warn("heartbeat", "err", err)
			}
			lookBehind(ctx, c.Store, c.Server.Behind, c.cfg.Log)
			if err := noteOlderInstances(ctx, c.Store, c.Hub, c.cfg.Log); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("looking for instances of older builds", "err", err)
			}
			if err := c.Store.PruneRevocations(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("pruning revocations", "err", err)
			}
			// The refused set is read again, and parked polls of newly
			// refused machines closed: a short command beside a SQLite
			// controller (user add) revokes where no notification reaches
			// this process, and on PostgreSQL a notification sent while
			// this instance's listener was away is lost.
			if err := c.Store.AnnounceRevocations(ctx, c.Server.Auth.Revoked.Revoked); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("reading revocations", "err", err)
			}
			// Refusals counted after their key's last audit row, with none
			// since to carry them onto the record.
			if err := errors.Join(c.Server.RecordOverdueRefusals(ctx), c.Server.Service.RecordOverdueRefusals(ctx)); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("recording refusals", "err", err)
			}
			// API tokens' last use, noted in memory at most once a minute each.
			if uses := c.Server.Auth.Used.Take(); len(uses) > 0 {
				if err := c.Store.TouchAPITokens(ctx, uses); err != nil && ctx.Err() == nil {
					c.Server.Auth.Used.Return(uses)
					c.cfg.Log.Warn("recording API tokens' last use", "err", err)
				}
			}
		}
	}
}

// retention trims sends, reports and declarations past --keep-sends, off
// the poll path: at start (on PostgreSQL this makes the next epochs'
// partitions) and then every RetentionEvery.
func (c *Controller) retention(ctx context.Context) {
	t := time.NewTicker(c.cfg.RetentionEvery)
	defer t.Stop()
	for {
		res, err := c.Store.RunRetention(ctx, store.Retention{Keep: c.cfg.KeepSends})
		switch {
		case err != nil && ctx.Err() == nil:
			c.cfg.Log.Warn("retention", "err", err)
		case res.Removed > 0 || len(res.Dropped) > 0:
			c.cfg.Log.Info("retention", "removed", res.Removed, "carried_forward", res.Carried, "epochs_dropped", res.Dropped)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// rollouts advances host rollouts (waves, deadlines, completion) and plans
// (tiers, completion).
func (c *Controller) rollouts(ctx context.Context) {
	t := time.NewTicker(c.cfg.RolloutEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if err := c.Store.StepRollouts(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("stepping rollouts", "err", err)
			}
			if err := c.Store.StepPlans(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Log.Warn("stepping plans", "err", err)
			}
		}
	}
}

// URL is where the controller listens.
func (c *Controller) URL() string {
	if c.TLS {
		return "https://" + c.Addr.String()
	}
	return "http://" + c.Addr.String()
}

// Stop drains (held polls answered 503, nothing composed), stops serving
// within the drain timeout, and marks the instance stopped.
func (c *Controller) Stop() error {
	ctx := context.Background()
	_ = c.Store.SetInstanceState(ctx, c.Instance, models.InstanceDraining)
	c.Server.Drain()
	sctx, cancel := context.WithTimeout(ctx, c.cfg.DrainTimeout)
	defer cancel()
	err := c.Echo.Shutdown(sctx)
	<-c.done
	// The refusals counted and not yet on the record, whatever their age.
	if err := errors.Join(c.Server.RecordPendingRefusals(ctx), c.Server.Service.RecordPendingRefusals(ctx)); err != nil {
		c.cfg.Log.Warn("recording refusals", "err", err)
	}
	c.cancel()
	c.workers.Wait() // the last last-seen flush is written before the store closes
	_ = c.Store.SetInstanceState(ctx, c.Instance, models.InstanceStopped)
	if cerr := c.Store.Close(); err == nil {
		err = cerr
	}
	return err
}

// firstUser makes an admin with a random password on a store with no users
// and prints it once: there is no fixed default password.
func firstUser(ctx context.Context, st *store.Store, cfg Config) error {
	n, err := st.CountUsers(ctx)
	if err != nil || n > 0 {
		return err
	}
	pw := auth.NewSecret()[:24]
	h, err := auth.HashPassword(pw)
	if err != nil {
		return err
	}
	if err := st.CreateUser(ctx, "controller", &models.User{Name: "admin", Role: models.RoleAdmin, PasswordHash: h}); err != nil {
		if errors.Is(err, models.ErrConflict) {
			return nil // another replica made it first
		}
		return err
	}
	if cfg.Out != nil {
		fmt.Fprintf(cfg.Out, "\nFirst start: an admin user was made. Log in as\n\n    user: admin\n    password: %s\n\nThis password is shown once. Make your own users with\n    mesh-controller user add NAME --role admin --password-stdin\n\n", pw)
	}
	return nil
}

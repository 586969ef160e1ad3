// Command mesh-controller runs the controller: `serve` (the default),
// `migrate`, `user add`, `demo`. Flags go before or after the subcommand;
// an unknown subcommand is an error, never a server.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"mesh/api"
	"mesh/auth"
	"mesh/cmd/internal/cli"
	"mesh/conns"
	"mesh/controller"
	"mesh/models"
	"mesh/store"
	"mesh/version"
	"mesh/web"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	os.Exit(cli.Exit("mesh-controller", err, os.Stderr))
}

// run executes one command line; a cli.UsageError is one that could not
// be run as written.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, rootCommand(stdin, stdout, stderr), version.String(), args, stdin, stdout, stderr)
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// storeOpts are the flags every subcommand takes (persistent on the root,
// so they go before or after the subcommand).
type storeOpts struct {
	dataDir, databaseURL, level string
}

func (o *storeOpts) flags(fs *pflag.FlagSet) {
	fs.StringVar(&o.dataDir, "data", env("MESH_DATA_DIR", "./mesh-data"), "data dir: the SQLite store and its lock (MESH_DATA_DIR)")
	fs.StringVar(&o.databaseURL, "database", env("MESH_DATABASE_URL", ""), "postgres:// URL; empty = SQLite in the data dir (MESH_DATABASE_URL)")
	fs.StringVar(&o.level, "log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error (MESH_LOG_LEVEL)")
}

func (o *storeOpts) config() controller.Config {
	return controller.Config{DataDir: o.dataDir, DatabaseURL: o.databaseURL}
}

// rootCommand is the command tree. The root itself serves, so that a bare
// `mesh-controller` (and the README's `go run ./cmd/mesh-controller`) keeps
// starting the controller; any other word must be a subcommand.
func rootCommand(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	st := &storeOpts{}
	root := &cobra.Command{
		Use:   "mesh-controller",
		Short: "The mesh controller: serves the API, the dashboard and the hosts' long polls (serve is the default)",
		Args:  cli.NoSubcommand,
	}
	st.flags(root.PersistentFlags())
	rootServe := &serveOpts{}
	rootServe.flags(root.Flags())
	root.RunE = func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), st, rootServe, stdout, stderr) }

	srv := &serveOpts{}
	serveCmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the API, the dashboard and the hosts (the default)",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return serve(cmd.Context(), st, srv, stdout, stderr) },
	}
	srv.flags(serveCmd.Flags())

	migrateCmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the store's schema migrations (serve does too) and print its version",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return migrate(cmd.Context(), st.config(), stdout) },
	}

	userCmd := &cobra.Command{
		Use:   "user",
		Short: "Manage users in the store directly (no controller needed)",
		Args:  cobra.ArbitraryArgs,
		RunE:  cli.NeedSubcommand,
	}
	var role string
	var fromStdin bool
	userAddCmd := &cobra.Command{
		Use:   "add NAME --role ROLE --password-stdin",
		Short: "Add a user, or set an existing one's role and password",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r := role
			if !cmd.Flags().Changed("role") {
				r = "" // an existing user keeps theirs; a new one is a viewer
			}
			return userAdd(cmd.Context(), st.config(), args[0], r, fromStdin, stdin, stdout)
		},
	}
	userAddCmd.Flags().StringVar(&role, "role", models.RoleViewer, "viewer, operator, admin or builder (an existing user keeps theirs unless given)")
	userAddCmd.Flags().BoolVar(&fromStdin, "password-stdin", false, "read the password from the first line of stdin")
	userCmd.AddCommand(userAddCmd)

	var demoListen string
	demoCmd := &cobra.Command{
		Use:   "demo",
		Short: "A living mesh in temp dirs: a controller, three local hosts, two sample modules; removed on Ctrl-C",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, f := range []string{"data", "database", "log-level"} {
				if cmd.Flags().Changed(f) {
					return cli.Usagef("demo --%s: the demo runs on SQLite in a temporary directory, logging warnings only; --data, --database and --log-level are for the other commands", f)
				}
			}
			return demo(cmd.Context(), demoListen, stdout, stderr)
		},
	}
	demoCmd.Flags().StringVar(&demoListen, "listen", env("MESH_LISTEN", "127.0.0.1:8080"), "address to serve on")

	backupCmd := &cobra.Command{
		Use:   "backup FILE",
		Short: "Write a consistent copy of the SQLite store to FILE, while the controller serves (PostgreSQL: pg_dump)",
		Long: `Write a consistent copy of the SQLite store to FILE (a new file, mode 0600), while
controllers serve it. To restore: stop the controller, 'mesh-controller restore FILE',
and start it. The copy holds
the signing keys as the store does (encrypted only under --key-file): keep it as
you keep them. A PostgreSQL store is backed up with pg_dump.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Stopped (Ctrl-C, a timeout, a unit stopped), the copy is cut
			// short and what it wrote removed: it was killed, and left a
			// file under FILE's name, sized like a backup.
			ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			return backup(ctx, st.config(), args[0], stdout)
		},
	}

	restoreCmd := &cobra.Command{
		Use:   "restore FILE",
		Short: "Put a backup (mesh-controller backup FILE) in place as the SQLite store, with the controller stopped; nothing is lost",
		Long: `Put FILE, a backup made by 'mesh-controller backup', in place as the store of
the data dir, which no controller may be serving (stop it first). Nothing is
lost: the store it replaces, with its write-ahead log, is moved aside as
mesh.db.before-restore-<time>, named in the output. No revocation is undone:
every revocation in force in the replaced store — a machine revoked, a user
disabled, an API token or a session revoked — is carried into the restored
one, and so is every join token spent or revoked since, so a backup from
before it does not let the credential in again; so are the people (passwords,
roles, disabled, as the replaced store has them), and a person only the backup
has is disabled. Nothing is carried from another mesh's store (no signing key
in common, as a fresh controller's on a new machine), nor from one that cannot
be read; it is moved aside all the same, and the output says so.

After a restore, hosts that finished generations after the backup are in
conflict until an admin resolves them (meshctl machines resolve NAME): their
machines are shown so, and nothing is sent to them meanwhile. A PostgreSQL store is restored with
PostgreSQL's tools (pg_restore).`,
		Example: "  systemctl stop mesh-controller\n  mesh-controller restore /backups/mesh-2026-12-01.db --data /var/lib/mesh-controller\n  systemctl start mesh-controller",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return restore(cmd.Context(), st.config(), args[0], stdout)
		},
	}

	versionCmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run:   func(*cobra.Command, []string) { fmt.Fprintln(stdout, "mesh-controller", version.String()) },
	}
	root.AddCommand(serveCmd, migrateCmd, userCmd, backupCmd, restoreCmd, demoCmd, versionCmd)
	return root
}

// serveOpts are serve's own flags (the root's too, since it serves).
type serveOpts struct {
	cfg       controller.Config
	pprofAddr string
	maxUpload cli.ByteSize
	keepSends keepDuration
	// envErr is a malformed environment variable, reported only when
	// serving: the flags are defined for every command line.
	envErr error
}

func (o *serveOpts) flags(fs *pflag.FlagSet) {
	cfg := &o.cfg
	fs.StringVar(&cfg.Listen, "listen", env("MESH_LISTEN", "127.0.0.1:8080"), "address to serve on (MESH_LISTEN)")
	fs.DurationVar(&cfg.Rules.OfflineAfter, "offline-after", models.OfflineAfter, "a machine whose host has not polled for this long is offline")
	fs.DurationVar(&cfg.Rules.UnhealthyAfter, "unhealthy-after", models.UnhealthyAfter, "a machine whose declared check (or its host's own, of its state dir) has failed for this long is unhealthy (a service still starting is not)")
	o.keepSends = keepDuration(models.DefaultKeepSends)
	if v := os.Getenv("MESH_KEEP_SENDS"); v != "" {
		if err := o.keepSends.Set(v); err != nil {
			o.envErr = errors.Join(o.envErr, fmt.Errorf("MESH_KEEP_SENDS: %w", err))
		}
	}
	fs.Var(&o.keepSends, "keep-sends", "how long sends, reports and declarations are kept, e.g. 90d, 720h; each machine's latest send and report, its last applied send and declaration and every send of its current generation are kept past it; 0 keeps everything (MESH_KEEP_SENDS)")
	fs.StringVar(&o.pprofAddr, "pprof", "", "serve Go's profiler (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty. Never expose it: it is unauthenticated")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", 30*time.Second, "how long a request waits on the store before it answers 503 (long polls wait on memory, not the store)")
	fs.DurationVar(&cfg.ResyncEvery, "resync", 30*time.Second, "PostgreSQL: how often every machine's generation is re-read (the bound on a missed notification)")
	maxConns, err := strconv.Atoi(env("MESH_MAX_CONNS", "0"))
	if err != nil {
		o.envErr = errors.Join(o.envErr, fmt.Errorf("MESH_MAX_CONNS: %w", err))
	}
	fs.IntVar(&cfg.MaxConns, "max-conns", maxConns, fmt.Sprintf("most open connections; past it less the last %d (at most half, kept for GET /healthz and /readyz), a new one takes the place of the unknown one waiting longest on its client (between requests, trickling a body, not reading its answer, or silent a second), else is answered 503; a host's or person's connection (up to 8 each) is never closed so; 0 = the open-file limit, raised at start, less %d for the store and files (MESH_MAX_CONNS)", conns.ProbeReserve, conns.FileReserve))
	fs.StringVar(&cfg.KeyFile, "key-file", env("MESH_KEY_FILE", ""), "file of the 32-byte key (raw, 64 hex characters or base64; mode 0600) that encrypts the signing keys in the store; MESH_KEY may hold the key itself instead; empty = stored in plaintext (MESH_KEY_FILE)")
	cfg.Key = os.Getenv("MESH_KEY")
	if cfg.TrustedProxies, err = web.ParseTrustedProxies(os.Getenv("MESH_TRUSTED_PROXIES")); err != nil {
		o.envErr = errors.Join(o.envErr, fmt.Errorf("MESH_TRUSTED_PROXIES: %w", err))
	}
	fs.Func("trusted-proxies", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For/-Proto/-Host are believed; default none (MESH_TRUSTED_PROXIES)", func(v string) (err error) {
		cfg.TrustedProxies, err = web.ParseTrustedProxies(v)
		return err
	})
	o.maxUpload = cli.ByteSize(api.DefaultMaxUpload)
	if v := os.Getenv("MESH_MAX_UPLOAD"); v != "" {
		if err := o.maxUpload.Set(v); err != nil {
			o.envErr = errors.Join(o.envErr, fmt.Errorf("MESH_MAX_UPLOAD: %w", err))
		}
	}
	o.envErr = errors.Join(o.envErr, tlsFlags(fs, cfg))
	fs.Var(&o.maxUpload, "max-upload", "largest upload body (a build's artifact, a host release), e.g. 512MiB, 2GiB; streamed into the store, never held in memory (MESH_MAX_UPLOAD)")
}

func serve(ctx context.Context, st *storeOpts, o *serveOpts, stdout, stderr io.Writer) error {
	if o.envErr != nil {
		return o.envErr
	}
	cfg := o.cfg
	cfg.DataDir, cfg.DatabaseURL = st.dataDir, st.databaseURL
	cfg.MaxUpload = int64(o.maxUpload)
	cfg.KeepSends = time.Duration(o.keepSends)
	if cfg.KeepSends == 0 {
		cfg.KeepSends = -1 // 0 on the command line: kept for ever
	}
	if cfg.MaxConns < 0 {
		return cli.Usagef("--max-conns %d: 0 or more", cfg.MaxConns)
	}
	// A duration of zero or less is no bound: a negative --resync turned
	// off the re-read that catches a missed notification, and a negative
	// --offline-after or --unhealthy-after made every machine read so.
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"offline-after", cfg.Rules.OfflineAfter}, {"unhealthy-after", cfg.Rules.UnhealthyAfter}, {"store-timeout", cfg.StoreTimeout}, {"resync", cfg.ResyncEvery}} {
		if d.v <= 0 {
			return cli.Usagef("--%s %s: a positive duration, like 30s", d.flag, d.v)
		}
	}
	level, err := cli.LogLevel(st.level)
	if err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	soft, hard, err := conns.RaiseFileLimit(cfg.Log)
	if err != nil {
		cfg.Log.Warn("open-file limit not raised", "err", err)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = conns.DefaultMax(soft)
	}
	cfg.Log.Info("open-file limit", "soft", soft, "hard", hard, "max_conns", cfg.MaxConns)
	cfg.Out = stdout
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if o.pprofAddr != "" {
		if err := servePprof(ctx, o.pprofAddr, cfg.Log); err != nil {
			return err
		}
	}
	c, err := controller.Start(ctx, cfg)
	if err != nil {
		return err
	}
	where := cfg.DataDir + " (SQLite)"
	if cfg.DatabaseURL != "" {
		where = "PostgreSQL"
	}
	keys := "in plaintext in the store (no --key-file)"
	if c.Store.SealsKeys() {
		keys = "encrypted at rest (MESH_KEY)"
		if cfg.KeyFile != "" {
			keys = "encrypted at rest (key file " + cfg.KeyFile + ")"
		}
	}
	fmt.Fprintf(stdout, "mesh-controller %s serving on %s\n  store: %s\n  keys:  %s\n  TLS:   %s\n  dashboard: %s/\n  API:   %s/api/v1  (spec: %s/openapi.yaml)\n  log in: POST %s/api/v1/auth/login {\"username\", \"password\"}\n",
		version.String(), c.URL(), where, keys, tlsBanner(c, cfg), c.URL(), c.URL(), c.URL(), c.URL())
	if c.TLS {
		// The CA's certificate is public (its pin is what is trusted): kept
		// beside the data for curl --cacert and a browser's trust store.
		caFile := filepath.Join(cfg.DataDir, "mesh-ca.pem")
		if err := os.WriteFile(caFile, c.CA.PEM(), 0o644); err != nil {
			cfg.Log.Warn("writing the mesh CA's certificate", "file", caFile, "err", err)
		} else {
			fmt.Fprintf(stdout, "  CA:    %s  (curl --cacert; meshctl login --ca-pin %s)\n", caFile, c.CA.Pin())
		}
	}
	<-ctx.Done()
	cfg.Log.Info("draining", "instance", c.Instance)
	return c.Stop()
}

// tlsFlags are serve's TLS flags; the error is an environment variable's
// that is not what its flag takes.
func tlsFlags(fs *pflag.FlagSet, cfg *controller.Config) (envErr error) {
	tlsEnv, err := strconv.ParseBool(os.Getenv("MESH_TLS"))
	if err != nil && os.Getenv("MESH_TLS") != "" {
		envErr = fmt.Errorf("MESH_TLS: %q: true or false (1 or 0)", os.Getenv("MESH_TLS"))
	}
	fs.BoolVar(&cfg.TLS, "tls", tlsEnv, "serve TLS on a loopback address too (elsewhere it is the default) (MESH_TLS)")
	fs.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve plain HTTP on an address that is not loopback: tokens travel in the clear (warned of at every start)")
	// Each name, from the flag or the variable, is checked and trimmed
	// alike: an untrimmed " ctl2" escaped the check that keeps service
	// certificates from naming the controller.
	advertise := func(v string) error {
		if v = strings.TrimSpace(v); v == "" || strings.ContainsAny(v, "/: ") && net.ParseIP(v) == nil {
			return fmt.Errorf("%q: a host name or an IP address, without scheme or port", v)
		}
		cfg.Advertise = append(cfg.Advertise, v)
		return nil
	}
	if v := os.Getenv("MESH_ADVERTISE"); v != "" {
		for _, name := range strings.Split(v, ",") {
			if err := advertise(name); err != nil {
				envErr = errors.Join(envErr, fmt.Errorf("MESH_ADVERTISE: %w", err))
			}
		}
	}
	fs.Func("advertise", "a host name or IP address hosts reach this controller by, named in its serving certificate (repeatable; the first is the URL join tokens give) (MESH_ADVERTISE, comma-separated)", advertise)
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", env("MESH_TLS_CERT", ""), "PEM certificate (chain) of your own for the dashboard and API, presented to clients asking for a name it covers that is not advertised; hosts keep the mesh CA (MESH_TLS_CERT)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", env("MESH_TLS_KEY", ""), "the PEM private key of --tls-cert (MESH_TLS_KEY)")
	if v := env("MESH_ACME_DOMAINS", ""); v != "" {
		for _, d := range strings.Split(v, ",") {
			cfg.ACME.Domains = append(cfg.ACME.Domains, strings.TrimSpace(d))
		}
	}
	fs.Func("acme-domain", "a public name whose certificate for the dashboard and API comes by ACME (TLS-ALPN-01 on this listener, reachable on port 443) instead of --tls-cert; hosts keep the mesh CA (repeatable) (MESH_ACME_DOMAINS, comma-separated)", func(v string) error {
		cfg.ACME.Domains = append(cfg.ACME.Domains, strings.TrimSpace(v))
		return nil
	})
	fs.StringVar(&cfg.ACME.Directory, "acme-directory", env("MESH_ACME_DIRECTORY", "https://acme-v02.api.letsencrypt.org/directory"), "the ACME directory URL (MESH_ACME_DIRECTORY)")
	fs.StringVar(&cfg.ACME.Email, "acme-email", env("MESH_ACME_EMAIL", ""), "the ACME account's contact address (MESH_ACME_EMAIL)")
	fs.StringVar(&cfg.ACME.CAFile, "acme-ca-file", env("MESH_ACME_CA_FILE", ""), "PEM certificate(s) to trust for a private ACME server's own TLS (MESH_ACME_CA_FILE)")
	fs.DurationVar(&cfg.CertLifetime, "cert-lifetime", 30*24*time.Hour, "lifetime of the serving certificate the mesh CA issues (renewed at two thirds)")
	fs.DurationVar(&cfg.MachineCertLifetime, "machine-cert-lifetime", 30*24*time.Hour, "lifetime of a machine's client certificate (its host renews it at two thirds)")
	fs.Func("host-bearer-until", "a date (2027-03-31 or RFC 3339): until then a controller serving TLS serves hosts without a certificate over plain HTTP too, on the same port, so they move to TLS by themselves; after it they are refused", func(v string) error {
		t, err := parseUntil(v)
		cfg.HostBearerUntil = t
		return err
	})
	fs.DurationVar(&cfg.MachineCertGrace, "machine-cert-grace", 7*24*time.Hour, "how long past expiry a host that was offline may still renew its certificate, once")
	return envErr
}

// tlsBanner says how the controller serves, for the start banner.
func tlsBanner(c *controller.Controller, cfg controller.Config) string {
	switch {
	case c.TLS && len(cfg.ACME.Domains) > 0:
		return "on, mesh CA pin " + c.CA.Pin() + " (hosts); ACME certificates from " + cfg.ACME.Directory + " for " + strings.Join(cfg.ACME.Domains, ", ")
	case c.TLS && cfg.TLSCertFile != "":
		return "on, mesh CA pin " + c.CA.Pin() + " (hosts); your certificate " + cfg.TLSCertFile + " for the names it covers"
	case c.TLS:
		return "on, mesh CA pin " + c.CA.Pin() + " (join tokens carry it)"
	case cfg.InsecureHTTP:
		return "OFF (--insecure-http): tokens travel in the clear"
	}
	return "off (loopback; --tls turns it on), mesh CA pin " + c.CA.Pin()
}

// keepDuration is a flag of a duration that also takes whole days ("90d").
type keepDuration time.Duration

func (k *keepDuration) Set(v string) error {
	if n, ok := strings.CutSuffix(v, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil || days < 0 {
			return fmt.Errorf("%q: a number of days (90d) or a duration (720h)", v)
		}
		if maxDays := int64(math.MaxInt64 / int64(24*time.Hour)); int64(days) > maxDays {
			// Multiplied, it would wrap to minutes or below zero (off).
			return fmt.Errorf("%q: at most %dd (0 keeps everything for ever)", v, maxDays)
		}
		*k = keepDuration(time.Duration(days) * 24 * time.Hour)
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q: a number of days (90d) or a duration (720h)", v)
	}
	*k = keepDuration(d)
	return nil
}

func (k *keepDuration) String() string {
	d := time.Duration(*k)
	if d > 0 && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// Type names the flag's value in --help.
func (k *keepDuration) Type() string { return "duration" }

func migrate(ctx context.Context, cfg controller.Config, stdout io.Writer) error {
	st, err := controller.OpenStore(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer st.Close()
	v, known, err := st.SchemaVersion(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "store schema at %d (this build knows %d)\n", v, known)
	return nil
}

// backup copies the store without migrating it: the copy is the store as
// it is, for whichever build serves it.
func backup(ctx context.Context, cfg controller.Config, path string, stdout io.Writer) error {
	if cfg.DatabaseURL == "" {
		// Opening makes a store where there is none: a data dir mistyped
		// would be backed up, empty, without a word.
		if _, err := os.Stat(filepath.Join(cfg.DataDir, "mesh.db")); err != nil {
			return fmt.Errorf("no store to back up in %s (--data, MESH_DATA_DIR): %w", cfg.DataDir, err)
		}
	}
	st, err := store.Open(ctx, store.Config{DataDir: cfg.DataDir, DatabaseURL: cfg.DatabaseURL})
	if err != nil {
		return err
	}
	defer st.Close()
	start := time.Now()
	if err := st.Backup(ctx, path); err != nil {
		return err
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "backed up the store to %s (%d bytes, %s)\n", path, fi.Size(), time.Since(start).Round(time.Millisecond))
	return nil
}

// restore puts a backup in place as the SQLite store (store.Restore).
func restore(ctx context.Context, cfg controller.Config, path string, stdout io.Writer) error {
	if cfg.DatabaseURL != "" {
		return errors.New("a PostgreSQL store is restored with PostgreSQL's tools (pg_restore), not here")
	}
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("the backup to restore: %w", err)
	}
	// A data dir mistyped would be made, restored into and served by no
	// one, while the store served stays as it was.
	if fi, err := os.Stat(cfg.DataDir); err != nil || !fi.IsDir() {
		return fmt.Errorf("no data dir %s (--data, MESH_DATA_DIR): restore puts the backup in place of the store a controller serves there", cfg.DataDir)
	}
	r, err := store.Restore(ctx, cfg.DataDir, path, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "restored %s as the store of %s (schema %d)\n", path, cfg.DataDir, r.Schema)
	if r.Kept != "" {
		fmt.Fprintf(stdout, "the store it replaced is kept as %s\n", r.Kept)
	} else {
		fmt.Fprintf(stdout, "the data dir held no store: nothing was replaced\n")
	}
	if r.APITokens > 0 {
		fmt.Fprintf(stdout, "%d API token(s) made since the backup carried into it (listed, revocable)\n", r.APITokens)
	}
	if r.Unread != "" {
		fmt.Fprintf(stdout, "WARNING: nothing was carried from the store it replaced: %s; revoke and disable again what was since the backup (join tokens, people, API tokens listed), reset passwords changed since, and change the role or password of whoever made an API token since (it is signed by the same key and not listed)\n", r.Unread)
	}
	if r.JoinTokens > 0 {
		fmt.Fprintf(stdout, "%d join token(s) spent or revoked since the backup stay so\n", r.JoinTokens)
	}
	if r.People > 0 {
		fmt.Fprintf(stdout, "%d person(s) carried from the store it replaced (passwords, roles, disabled as they were there)", r.People)
		if len(r.Disabled) > 0 {
			fmt.Fprintf(stdout, "; disabled, as only the backup has them: %s", strings.Join(r.Disabled, ", "))
		}
		fmt.Fprintln(stdout)
	}
	if r.Revocations > 0 {
		fmt.Fprintf(stdout, "%d revocation(s) made since the backup carried into it", r.Revocations)
		if len(r.Machines) > 0 {
			fmt.Fprintf(stdout, "; machines revoked again: %s", strings.Join(r.Machines, ", "))
		}
		if len(r.Users) > 0 {
			fmt.Fprintf(stdout, "; people whose earlier tokens stay refused: %s", strings.Join(r.Users, ", "))
		}
		fmt.Fprintln(stdout)
	}
	fmt.Fprintln(stdout, "hosts that finished generations after the backup will be in conflict until resolved (meshctl machines resolve NAME)")
	return nil
}

// userAdd adds a user, or sets an existing one's password (and role, when
// role is not empty: a password reset once demoted the only admin to the
// flag's default, viewer).
func userAdd(ctx context.Context, cfg controller.Config, name, role string, fromStdin bool, stdin io.Reader, stdout io.Writer) error {
	if err := models.ValidName("name", name); err != nil {
		return err
	}
	if role != "" && !models.ValidRole(role) {
		return fmt.Errorf("role %q: one of viewer, operator, admin, builder", role)
	}
	if !fromStdin {
		return errors.New("--password-stdin is required: the password is read from stdin, never from the command line")
	}
	line, err := bufio.NewReader(stdin).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	hash, err := auth.HashPassword(strings.TrimRight(line, "\r\n"))
	if err != nil {
		return err
	}
	st, err := controller.OpenStore(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer st.Close()
	newRole := role
	if newRole == "" {
		newRole = models.RoleViewer
	}
	u := &models.User{Name: name, Role: newRole, PasswordHash: hash}
	err = st.CreateUser(ctx, "shell", u)
	if errors.Is(err, models.ErrConflict) {
		if role == "" {
			had, err := st.User(ctx, name)
			if err != nil {
				return err
			}
			role = had.Role
		}
		if err := st.UpdateUser(ctx, "shell", name, role, hash, auth.PersonTokenTTL); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s updated (role %s, new password); every session and API token %s held is revoked (a controller serving this store refuses them within its heartbeat, %s by default)\n",
			name, role, name, controller.DefaultHeartbeatEvery)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "user %s added (role %s)\n", name, newRole)
	return nil
}

// parseUntil reads a date (the end of that day, UTC) or an RFC 3339 time.
func parseUntil(v string) (time.Time, error) {
	if t, err := time.Parse(time.DateOnly, v); err == nil {
		return t.Add(24*time.Hour - time.Second), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want a date (2027-03-31) or an RFC 3339 time", v)
	}
	return t, nil
}

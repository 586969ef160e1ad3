// Command mesh-controller runs the controller: `serve` (the default),
// `migrate`, `user add`.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mesh/api"
	"mesh/auth"
	"mesh/conns"
	"mesh/controller"
	"mesh/models"
	"mesh/version"
	"mesh/web"
)

func main() {
	if err := run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "mesh-controller:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// storeFlags are the flags every subcommand takes.
func storeFlags(fs *flag.FlagSet, cfg *controller.Config) *string {
	fs.StringVar(&cfg.DataDir, "data", env("MESH_DATA_DIR", "./mesh-data"), "data dir: the SQLite store and its lock (MESH_DATA_DIR)")
	fs.StringVar(&cfg.DatabaseURL, "database", env("MESH_DATABASE_URL", ""), "postgres:// URL; empty = SQLite in the data dir (MESH_DATABASE_URL)")
	return fs.String("log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error (MESH_LOG_LEVEL)")
}

func logger(level string, w io.Writer) *slog.Logger {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		l = slog.LevelInfo
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l}))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stdout, "mesh-controller", version.String())
			return nil
		}
	}
	switch cmd {
	case "serve":
		return serve(args, stdout, stderr)
	case "migrate":
		return migrate(args, stdout, stderr)
	case "user":
		if len(args) == 0 || args[0] != "add" {
			return errors.New("usage: mesh-controller user add NAME --role R --password-stdin")
		}
		return userAdd(args[1:], stdin, stdout, stderr)
	case "demo":
		return demo(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "mesh-controller", version.String())
		return nil
	}
	return fmt.Errorf("unknown command %q (serve, migrate, user add, demo, version)", cmd)
}

func serve(args []string, stdout, stderr io.Writer) error {
	var cfg controller.Config
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := storeFlags(fs, &cfg)
	fs.StringVar(&cfg.Listen, "listen", env("MESH_LISTEN", "127.0.0.1:8080"), "address to serve on (MESH_LISTEN)")
	fs.DurationVar(&cfg.Rules.OfflineAfter, "offline-after", models.OfflineAfter, "a machine whose host has not polled for this long is offline")
	fs.DurationVar(&cfg.Rules.UnhealthyAfter, "unhealthy-after", models.UnhealthyAfter, "a machine whose declared check has failed for this long is unhealthy (a service still starting is not)")
	pprofAddr := fs.String("pprof", "", "serve Go's profiler (net/http/pprof) on this address, e.g. 127.0.0.1:6060; off when empty. Never expose it: it is unauthenticated")
	fs.DurationVar(&cfg.StoreTimeout, "store-timeout", 30*time.Second, "how long a request waits on the store before it answers 503 (long polls wait on memory, not the store)")
	fs.DurationVar(&cfg.ResyncEvery, "resync", 30*time.Second, "PostgreSQL: how often every machine's generation is re-read (the bound on a missed notification)")
	maxConns, err := strconv.Atoi(env("MESH_MAX_CONNS", "0"))
	if err != nil {
		return fmt.Errorf("MESH_MAX_CONNS: %w", err)
	}
	fs.IntVar(&cfg.MaxConns, "max-conns", maxConns, fmt.Sprintf("most open connections; past it a new one is answered 503 (the last %d, at most half, kept for GET /healthz and /readyz); 0 = the open-file limit, raised at start, less %d for the store and files (MESH_MAX_CONNS)", conns.ProbeReserve, conns.FileReserve))
	fs.StringVar(&cfg.KeyFile, "key-file", env("MESH_KEY_FILE", ""), "file of the 32-byte key (raw, 64 hex characters or base64; mode 0600) that encrypts the signing keys in the store; MESH_KEY may hold the key itself instead; empty = stored in plaintext (MESH_KEY_FILE)")
	cfg.Key = os.Getenv("MESH_KEY")
	if cfg.TrustedProxies, err = web.ParseTrustedProxies(os.Getenv("MESH_TRUSTED_PROXIES")); err != nil {
		return fmt.Errorf("MESH_TRUSTED_PROXIES: %w", err)
	}
	fs.Func("trusted-proxies", "comma-separated CIDRs of reverse proxies whose X-Forwarded-For/-Proto/-Host are believed; default none (MESH_TRUSTED_PROXIES)", func(v string) (err error) {
		cfg.TrustedProxies, err = web.ParseTrustedProxies(v)
		return err
	})
	maxUpload := byteSize(api.DefaultMaxUpload)
	if v := os.Getenv("MESH_MAX_UPLOAD"); v != "" {
		if err := maxUpload.Set(v); err != nil {
			return fmt.Errorf("MESH_MAX_UPLOAD: %w", err)
		}
	}
	tlsFlags(fs, &cfg)
	fs.Var(&maxUpload, "max-upload", "largest upload body (a build's artifact, a host release), e.g. 512MiB, 2GiB; streamed into the store, never held in memory (MESH_MAX_UPLOAD)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg.MaxUpload = int64(maxUpload)
	if cfg.MaxConns < 0 {
		return fmt.Errorf("--max-conns %d: 0 or more", cfg.MaxConns)
	}
	cfg.Log = logger(*level, stderr)
	soft, hard, err := conns.RaiseFileLimit(cfg.Log)
	if err != nil {
		cfg.Log.Warn("open-file limit not raised", "err", err)
	}
	if cfg.MaxConns == 0 {
		cfg.MaxConns = conns.DefaultMax(soft)
	}
	cfg.Log.Info("open-file limit", "soft", soft, "hard", hard, "max_conns", cfg.MaxConns)
	cfg.Out = stdout
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if *pprofAddr != "" {
		if err := servePprof(ctx, *pprofAddr, cfg.Log); err != nil {
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
	fmt.Fprintf(stdout, "mesh-controller %s serving on %s\n  store: %s\n  keys:  %s\n  TLS:   %s\n  API:   %s/api/v1  (spec: %s/openapi.yaml)\n  log in: POST %s/api/v1/auth/login {\"username\", \"password\"}\n",
		version.String(), c.URL(), where, keys, tlsBanner(c, cfg), c.URL(), c.URL(), c.URL())
	<-ctx.Done()
	cfg.Log.Info("draining", "instance", c.Instance)
	return c.Stop()
}

// tlsFlags are serve's TLS flags.
func tlsFlags(fs *flag.FlagSet, cfg *controller.Config) {
	tlsEnv, _ := strconv.ParseBool(os.Getenv("MESH_TLS"))
	fs.BoolVar(&cfg.TLS, "tls", tlsEnv, "serve TLS on a loopback address too (elsewhere it is the default) (MESH_TLS)")
	fs.BoolVar(&cfg.InsecureHTTP, "insecure-http", false, "serve plain HTTP on an address that is not loopback: tokens travel in the clear (warned of at every start)")
	if v := os.Getenv("MESH_ADVERTISE"); v != "" {
		cfg.Advertise = strings.Split(v, ",")
	}
	fs.Func("advertise", "a host name or IP address hosts reach this controller by, named in its serving certificate (repeatable; the first is the URL join tokens give) (MESH_ADVERTISE, comma-separated)", func(v string) error {
		if v = strings.TrimSpace(v); v == "" || strings.ContainsAny(v, "/: ") && net.ParseIP(v) == nil {
			return fmt.Errorf("%q: a host name or an IP address, without scheme or port", v)
		}
		cfg.Advertise = append(cfg.Advertise, v)
		return nil
	})
	fs.StringVar(&cfg.TLSCertFile, "tls-cert", env("MESH_TLS_CERT", ""), "PEM certificate (chain) of your own for the dashboard and API, presented to clients asking for a name it covers that is not advertised; hosts keep the mesh CA (MESH_TLS_CERT)")
	fs.StringVar(&cfg.TLSKeyFile, "tls-key", env("MESH_TLS_KEY", ""), "the PEM private key of --tls-cert (MESH_TLS_KEY)")
	fs.DurationVar(&cfg.CertLifetime, "cert-lifetime", 30*24*time.Hour, "lifetime of the serving certificate the mesh CA issues (renewed at two thirds)")
}

// tlsBanner says how the controller serves, for the start banner.
func tlsBanner(c *controller.Controller, cfg controller.Config) string {
	switch {
	case c.TLS && cfg.TLSCertFile != "":
		return "on, mesh CA pin " + c.CA.Pin() + " (hosts); your certificate " + cfg.TLSCertFile + " for the names it covers"
	case c.TLS:
		return "on, mesh CA pin " + c.CA.Pin() + " (join tokens carry it)"
	case cfg.InsecureHTTP:
		return "OFF (--insecure-http): tokens travel in the clear"
	}
	return "off (loopback; --tls turns it on), mesh CA pin " + c.CA.Pin()
}

// byteSize is a flag of bytes: a number with an optional KiB, MiB or GiB.
type byteSize int64

func (b *byteSize) String() string {
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if *b != 0 && int64(*b)%u.n == 0 {
			return strconv.FormatInt(int64(*b)/u.n, 10) + u.s
		}
	}
	return strconv.FormatInt(int64(*b), 10)
}

func (b *byteSize) Set(v string) error {
	mult := int64(1)
	for _, u := range []struct {
		s string
		n int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(v, u.s) {
			v, mult = strings.TrimSuffix(v, u.s), u.n
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return fmt.Errorf("%q: a positive size in bytes, KiB, MiB or GiB", v)
	}
	*b = byteSize(n * mult)
	return nil
}

func migrate(args []string, stdout, stderr io.Writer) error {
	var cfg controller.Config
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	ctx := context.Background()
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

func userAdd(args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	var cfg controller.Config
	fs := flag.NewFlagSet("user add", flag.ContinueOnError)
	fs.SetOutput(stderr)
	storeFlags(fs, &cfg)
	role := fs.String("role", models.RoleViewer, "viewer, operator, admin or builder")
	fromStdin := fs.Bool("password-stdin", false, "read the password from the first line of stdin")
	// The name comes first (user add NAME --role R); flag stops at it.
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return errors.New("usage: mesh-controller user add NAME --role R --password-stdin")
	}
	name := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if err := models.ValidName("name", name); err != nil {
		return err
	}
	if !models.ValidRole(*role) {
		return fmt.Errorf("role %q: one of viewer, operator, admin, builder", *role)
	}
	if !*fromStdin {
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
	ctx := context.Background()
	st, err := controller.OpenStore(ctx, cfg, false)
	if err != nil {
		return err
	}
	defer st.Close()
	u := &models.User{Name: name, Role: *role, PasswordHash: hash}
	err = st.CreateUser(ctx, "shell", u)
	if errors.Is(err, models.ErrConflict) {
		if err := st.UpdateUser(ctx, "shell", name, *role, hash); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "user %s updated (role %s)\n", name, *role)
		return nil
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "user %s added (role %s)\n", name, *role)
	return nil
}

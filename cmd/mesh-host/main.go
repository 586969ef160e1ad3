// Command mesh-host is the host agent: `enroll` once, then `run` (or
// `launch`, under a service manager); `journal` shows what it applied.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"mesh/agent"
	"mesh/version"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, agent.ErrUpgradeStaged) {
		os.Exit(agent.ExitUpgrade) // the launcher takes it from here
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesh-host:", err)
		os.Exit(1)
	}
}

func env(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

// multi is a repeatable flag.
type multi []string

func (m *multi) String() string     { return strings.Join(*m, ",") }
func (m *multi) Set(v string) error { *m = append(*m, v); return nil }

// byteSize is a flag of bytes: a number, or one with KiB, MiB or GiB.
type byteSize int64

func (b *byteSize) String() string { return strconv.FormatInt(int64(*b), 10) }
func (b *byteSize) Set(v string) error {
	mult := int64(1)
	for suffix, m := range map[string]int64{"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30} {
		if n, ok := strings.CutSuffix(v, suffix); ok {
			v, mult = n, m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mult {
		return fmt.Errorf("%q is not a positive size (bytes, or with KiB, MiB, GiB)", v)
	}
	*b = byteSize(n * mult)
	return nil
}

func run(args []string, stdout, stderr io.Writer) error {
	for _, a := range args {
		if a == "--version" || a == "-version" {
			fmt.Fprintln(stdout, "mesh-host", version.String())
			return nil
		}
	}
	if len(args) == 0 {
		return errors.New("usage: mesh-host enroll|run|launch|journal [flags] (mesh-host CMD -h for flags)")
	}
	cmd, args := args[0], args[1:]
	switch cmd {
	case "enroll":
		return enroll(args, stdout, stderr)
	case "run":
		return runAgent(args, stderr)
	case "launch":
		return launch(args, stderr)
	case "journal":
		return journal(args, stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "mesh-host", version.String())
		return nil
	}
	return fmt.Errorf("unknown command %q (enroll, run, launch, journal, version)", cmd)
}

func enroll(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("enroll", flag.ContinueOnError)
	fs.SetOutput(stderr)
	controllers := fs.String("controller", env("MESH_CONTROLLER", ""), "controller URL(s), comma-separated, tried in turn")
	token := fs.String("join-token", env("MESH_JOIN_TOKEN", ""), "a single-use join token from an admin")
	pin := fs.String("ca-pin", env("MESH_CA_PIN", ""), "the mesh CA's pin (sha256:…), given with the join token; the controller's certificate must chain to that CA before the token is sent (MESH_CA_PIN)")
	name := fs.String("name", "", "this machine's name")
	state := fs.String("state", env("MESH_HOST_STATE", "/var/lib/mesh-host"), "state dir (MESH_HOST_STATE)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *controllers == "" || *token == "" || *name == "" {
		return errors.New("--controller, --join-token and --name are required")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	id, err := agent.Enroll(ctx, agent.Enrolment{Controllers: strings.Split(*controllers, ","), JoinToken: *token,
		CAPin: *pin, Name: *name, StateDir: *state})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "enrolled as %s with %s; %d trusted key(s) kept in %s\n", id.Machine, strings.Join(id.Controllers, ", "), len(id.Keys), *state)
	if id.CAPin != "" {
		fmt.Fprintf(stdout, "the controller's certificate verified against the mesh CA %s, kept for every later request\n", id.CAPin)
	}
	return nil
}

// agentFlags are run's flags (launch takes them too).
func agentFlags(fs *flag.FlagSet, cfg *agent.Config) *string {
	fs.StringVar(&cfg.StateDir, "state", env("MESH_HOST_STATE", "/var/lib/mesh-host"), "state dir (MESH_HOST_STATE)")
	fs.StringVar(&cfg.Root, "root", env("MESH_HOST_ROOT", "/"), "map every declared path under this dir (MESH_HOST_ROOT)")
	fs.Var((*multi)(&cfg.AllowRoots), "allow-root", "a declared path must fall under one of these (repeatable; default /)")
	fs.StringVar(&cfg.Services, "services", "host", "run services under the host's own supervisor (host) or as systemd units (systemd)")
	fs.DurationVar(&cfg.Wait, "wait", 50*time.Second, "how long each poll is held")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", 5, "applies of one generation before it is rejected")
	fs.DurationVar(&cfg.RetryBase, "retry", time.Second, "first wait between failed applies (doubles)")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", 10*time.Second, "time between SIGTERM and SIGKILL when stopping a service")
	fs.DurationVar(&cfg.CheckEvery, "check-every", 30*time.Second, "how often declared checks run between applies; a change is reported at once (outcome checked)")
	cfg.Unpack = agent.DefaultUnpackLimits()
	fs.Var((*byteSize)(&cfg.Unpack.MaxBytes), "unpack-max-bytes", "a tree's archive unpacks to at most this many bytes (KiB, MiB, GiB)")
	fs.Var((*byteSize)(&cfg.Unpack.MaxFileBytes), "unpack-max-file", "at most this many bytes in any one file of a tree's archive (KiB, MiB, GiB)")
	fs.IntVar(&cfg.Unpack.MaxEntries, "unpack-max-entries", cfg.Unpack.MaxEntries, "at most this many entries in a tree's archive")
	fs.Int64Var(&cfg.Unpack.MaxRatio, "unpack-max-ratio", cfg.Unpack.MaxRatio, "a tree's archive unpacks to at most this many times its own size (1 MiB is always allowed)")
	return fs.String("log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error")
}

func runAgent(args []string, stderr io.Writer) error {
	var cfg agent.Config
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := agentFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return err
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(*level))
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg.Log.Info("mesh-host running", "version", version.String(), "state", cfg.StateDir, "root", cfg.Root, "services", cfg.Services)
	return agent.Run(ctx, cfg)
}

// launch is what a service manager runs: it takes run's flags, runs the
// known-good host, and tries staged releases with automatic rollback.
func launch(args []string, stderr io.Writer) error {
	var cfg agent.Config
	fs := flag.NewFlagSet("launch", flag.ContinueOnError)
	fs.SetOutput(stderr)
	level := agentFlags(fs, &cfg)
	deadline := fs.Duration("trial-deadline", 2*time.Minute, "how long a new release has to complete a reconcile before known-good is put back")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var l slog.Level
	_ = l.UnmarshalText([]byte(*level))
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l}))
	// Everything but the launcher's own flag goes to run.
	var runArgs []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name != "trial-deadline" {
			runArgs = append(runArgs, "--"+f.Name+"="+f.Value.String())
		}
	})
	if len(cfg.AllowRoots) > 1 {
		runArgs = slices.DeleteFunc(runArgs, func(a string) bool { return strings.HasPrefix(a, "--allow-root=") })
		for _, r := range cfg.AllowRoots {
			runArgs = append(runArgs, "--allow-root="+r)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.Launch(ctx, agent.LaunchConfig{StateDir: cfg.StateDir, RunArgs: runArgs, TrialDeadline: *deadline, Log: log})
}

func journal(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("journal", flag.ContinueOnError)
	fs.SetOutput(stderr)
	state := fs.String("state", env("MESH_HOST_STATE", "/var/lib/mesh-host"), "state dir (MESH_HOST_STATE)")
	asJSON := fs.Bool("json", false, "JSON lines")
	if err := fs.Parse(args); err != nil {
		return err
	}
	return agent.PrintJournal(*state, stdout, *asJSON)
}

// Command mesh-host is the host agent: `enroll` once, then `run` (or
// `launch`, under a service manager); `journal` shows what it applied.
// Flags go before or after the subcommand.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"mesh/agent"
	"mesh/cmd/internal/cli"
	"mesh/version"
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, agent.ErrUpgradeStaged) {
		os.Exit(agent.ExitUpgrade) // the launcher takes it from here
	}
	os.Exit(cli.Exit("mesh-host", err, os.Stderr))
}

// run executes one command line; a cli.UsageError is one that could not
// be run as written.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Execute(ctx, rootCommand(stdout, stderr), version.String(), args, os.Stdin, stdout, stderr)
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
func (m *multi) Type() string       { return "path" }

// rootCommand is the command tree: --state is every subcommand's, so it
// goes before or after the subcommand.
func rootCommand(stdout, stderr io.Writer) *cobra.Command {
	var state string
	root := &cobra.Command{
		Use:   "mesh-host",
		Short: "The mesh host agent: enroll once, then run (or launch, under a service manager)",
		Args:  cobra.ArbitraryArgs,
		RunE:  cli.NeedSubcommand,
	}
	root.PersistentFlags().StringVar(&state, "state", env("MESH_HOST_STATE", "/var/lib/mesh-host"), "state dir (MESH_HOST_STATE)")

	var en agent.Enrolment
	var controllers string
	enrollCmd := &cobra.Command{
		Use:   "enroll --controller URL --join-token T --name NAME",
		Short: "Enrol this machine with a controller, once, with a join token",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			en.StateDir = state
			return enroll(cmd.Context(), en, controllers, stdout)
		},
	}
	fs := enrollCmd.Flags()
	fs.StringVar(&controllers, "controller", env("MESH_CONTROLLER", ""), "controller URL(s), comma-separated, tried in turn")
	fs.StringVar(&en.JoinToken, "join-token", env("MESH_JOIN_TOKEN", ""), "a single-use join token from an admin")
	fs.StringVar(&en.CAPin, "ca-pin", env("MESH_CA_PIN", ""), "the mesh CA's pin (sha256:…), given with the join token; the controller's certificate must chain to that CA before the token is sent (MESH_CA_PIN)")
	fs.StringVar(&en.Name, "name", "", "this machine's name")

	var runCfg agent.Config
	runCmd := &cobra.Command{
		Use:   "run",
		Short: "Poll the controller, verify and apply what it sends, journal and report",
		Args:  cobra.NoArgs,
	}
	runLevel := agentFlags(runCmd.Flags(), &runCfg)
	runCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		runCfg.StateDir = state
		return runAgent(cmd.Context(), runCfg, *runLevel, stderr)
	}

	var launchCfg agent.Config
	launchCmd := &cobra.Command{
		Use:   "launch",
		Short: "What a service manager runs: run under a launcher that keeps known-good and rolls a failed upgrade back",
		Args:  cobra.NoArgs,
	}
	launchLevel := agentFlags(launchCmd.Flags(), &launchCfg)
	deadline := launchCmd.Flags().Duration("trial-deadline", 2*time.Minute, "how long a new release has to complete a reconcile before known-good is put back")
	launchCmd.RunE = func(cmd *cobra.Command, _ []string) error {
		launchCfg.StateDir = state
		if *deadline <= launchCfg.Wait {
			// A trial completes when a poll returns; one held as long as
			// the trial may last fails every trial (a launcher's move too).
			return cli.Usagef("--trial-deadline (%s) must be longer than --wait (%s): a release on trial completes its reconcile when a poll returns",
				*deadline, launchCfg.Wait)
		}
		return launch(cmd.Context(), cmd.Flags(), launchCfg, *launchLevel, *deadline, stderr)
	}

	var asJSON bool
	journalCmd := &cobra.Command{
		Use:   "journal",
		Short: "Print what this host applied, refused and rejected",
		Args:  cobra.NoArgs,
		RunE:  func(*cobra.Command, []string) error { return agent.PrintJournal(state, stdout, asJSON) },
	}
	journalCmd.Flags().BoolVar(&asJSON, "json", false, "JSON lines")

	var handover bool
	versionCmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(*cobra.Command, []string) {
			if handover {
				// A launcher asks before it re-executes as this binary.
				fmt.Fprintln(stdout, agent.LauncherHandover)
				return
			}
			fmt.Fprintln(stdout, "mesh-host", version.String())
		},
	}
	versionCmd.Flags().BoolVar(&handover, "launcher-handover", false, "print the launcher hand-over this binary takes (asked by a launcher before it moves to it)")
	_ = versionCmd.Flags().MarkHidden("launcher-handover")
	root.AddCommand(enrollCmd, runCmd, launchCmd, journalCmd, versionCmd)
	return root
}

func enroll(ctx context.Context, en agent.Enrolment, controllers string, stdout io.Writer) error {
	if controllers == "" || en.JoinToken == "" || en.Name == "" {
		return cli.Usagef("--controller, --join-token and --name are required")
	}
	en.Controllers = strings.Split(controllers, ",")
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	id, err := agent.Enroll(ctx, en)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "enrolled as %s with %s; %d trusted key(s) kept in %s\n", id.Machine, strings.Join(id.Controllers, ", "), len(id.Keys), en.StateDir)
	if id.CAPin != "" {
		fmt.Fprintf(stdout, "the controller's certificate verified against the mesh CA %s, kept for every later request\n", id.CAPin)
	}
	// What to run next, with the state dir it was given.
	fmt.Fprintf(stdout, "next: mesh-host launch --state %s   (or run it bare: mesh-host run --state %s; no upgrades)\n", en.StateDir, en.StateDir)
	return nil
}

// agentFlags are run's flags (launch takes them too); --state is the
// root's.
func agentFlags(fs *pflag.FlagSet, cfg *agent.Config) *string {
	fs.StringVar(&cfg.Root, "root", env("MESH_HOST_ROOT", "/"), "map every declared path under this dir (MESH_HOST_ROOT)")
	fs.Var((*multi)(&cfg.AllowRoots), "allow-root", "a declared path must fall under one of these (repeatable; default /)")
	fs.StringVar(&cfg.Services, "services", "host", "run services under the host's own supervisor (host) or as systemd units (systemd)")
	fs.DurationVar(&cfg.Wait, "wait", 50*time.Second, "how long each poll is held")
	fs.IntVar(&cfg.MaxAttempts, "max-attempts", 5, "applies of one generation before it is rejected")
	fs.DurationVar(&cfg.RetryBase, "retry", time.Second, "first wait between failed applies (doubles)")
	fs.DurationVar(&cfg.StopGrace, "stop-grace", 10*time.Second, "time between SIGTERM and SIGKILL when stopping a service")
	fs.DurationVar(&cfg.CheckEvery, "check-every", 30*time.Second, "how often declared checks run between applies; a change is reported at once (outcome checked)")
	cfg.Unpack = agent.DefaultUnpackLimits()
	fs.Var((*cli.ByteSize)(&cfg.Unpack.MaxBytes), "unpack-max-bytes", "a tree's archive unpacks to at most this many bytes (KiB, MiB, GiB)")
	fs.Var((*cli.ByteSize)(&cfg.Unpack.MaxFileBytes), "unpack-max-file", "at most this many bytes in any one file of a tree's archive (KiB, MiB, GiB)")
	fs.IntVar(&cfg.Unpack.MaxEntries, "unpack-max-entries", cfg.Unpack.MaxEntries, "at most this many entries in a tree's archive")
	fs.Int64Var(&cfg.Unpack.MaxRatio, "unpack-max-ratio", cfg.Unpack.MaxRatio, "a tree's archive unpacks to at most this many times its own size (1 MiB is always allowed)")
	cfg.Logs = agent.DefaultLogLimits()
	fs.Var((*cli.ByteSize)(&cfg.Logs.MaxBytes), "service-log-max", "a service's output file is rotated past this size (KiB, MiB, GiB; the host's own supervisor)")
	fs.IntVar(&cfg.Logs.Keep, "service-log-keep", cfg.Logs.Keep, "rotated output files kept per service")
	return fs.String("log-level", env("MESH_LOG_LEVEL", "info"), "debug, info, warn or error")
}

func runAgent(ctx context.Context, cfg agent.Config, level string, stderr io.Writer) error {
	l, err := cli.LogLevel(level)
	if err != nil {
		return err
	}
	// A directory that is no host's is said before "running" is.
	if _, err := agent.LoadIdentity(cfg.StateDir); err != nil {
		return err
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l}))
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	cfg.Log.Info("mesh-host running", "version", version.String(), "state", cfg.StateDir, "root", cfg.Root, "services", cfg.Services)
	err = agent.Run(ctx, cfg)
	if ctx.Err() != nil {
		// Stopped by a signal: said, so a host that is gone is not taken
		// for one that died. Its services run on, by design (each in a
		// session of its own), and are adopted by the next start.
		cfg.Log.Info("mesh-host stopped by a signal; its services keep running and the next start adopts them")
	}
	return err
}

// launch is what a service manager runs: it takes run's flags, runs the
// known-good host, and tries staged releases with automatic rollback.
func launch(ctx context.Context, fs *pflag.FlagSet, cfg agent.Config, level string, deadline time.Duration, stderr io.Writer) error {
	l, err := cli.LogLevel(level)
	if err != nil {
		return err
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: l}))
	// Everything given but the launcher's own flag goes to run.
	var runArgs []string
	fs.Visit(func(f *pflag.Flag) {
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
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	return agent.Launch(ctx, agent.LaunchConfig{StateDir: cfg.StateDir, RunArgs: runArgs, TrialDeadline: deadline, Log: log})
}

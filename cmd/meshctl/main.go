// Command meshctl is the operator's command line for a mesh controller:
// log in, list and inspect machines, assign modules, upload builds, watch
// plans and host rollouts. It speaks only through the Go client generated
// from openapi.yaml (package client), so every build proves the spec with
// a real client.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"mesh/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes one command line and returns the process's exit code: 0,
// 1 for an error (a problem answer, a bad flag, an unreachable
// controller), or the code an exitError carries (2 for a watched plan or
// rollout that ended other than done).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	a := &app{in: stdin, out: stdout, errOut: stderr}
	root := a.rootCommand()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	// Lines and their leading tabs kept (cobra's "Did you mean this?"
	// indents its suggestions); any other control character (a host's
	// words in a rollout's reason, say) written as a Go escape, as tables
	// write them.
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		rest := strings.TrimLeft(l, "\t")
		lines[i] = l[:len(l)-len(rest)] + shown(rest)
	}
	fmt.Fprintln(stderr, "meshctl: "+strings.Join(lines, "\n"))
	if strings.HasPrefix(err.Error(), "unknown command ") {
		fmt.Fprintln(stderr, "Run 'meshctl --help' (or the group's --help) for the commands.")
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 1
}

// exitError ends meshctl with a code other than 1.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

// app is one invocation: its global flags and where it reads and writes.
// Commands hang off it, so nothing is package-level state.
type app struct {
	in     io.Reader
	out    io.Writer
	errOut io.Writer

	controller string // --controller
	output     string // -o: table or json
}

func (a *app) rootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "meshctl",
		Short: "Operate a mesh controller: machines, assignments, builds, plans, host releases",
		Long: `meshctl talks to a mesh controller's API (openapi.yaml) with the token
'meshctl login' keeps in your config dir.

  --controller, MESH_CONTROLLER   the controller's URL (else the one logged in to)
  MESH_TOKEN                      a bearer token to use instead of the saved one

Every command prints a table by default and the API's JSON with -o json.
Exit codes: 0 ok; 1 an error (the controller's problem is printed as its
title and detail); 2 a watched plan or rollout ended other than done.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "table" && a.output != "json" {
				return fmt.Errorf("-o %q: use table or json", a.output)
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&a.controller, "controller", "", "the controller's URL (default: $MESH_CONTROLLER, else the one logged in to)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json (the API's JSON, for scripts)")
	root.AddCommand(a.loginCommand(), a.machinesCommand(), a.assignCommand(), a.unassignCommand(), a.pushCommand(),
		a.buildsCommand(), a.plansCommand(), a.releasesCommand(), a.tokensCommand(), a.usersCommand(),
		a.modulesCommand(), a.logsCommand(), a.sendsCommand(), a.auditCommand(), a.instancesCommand(), &cobra.Command{
			Use: "version", Short: "Print meshctl's version", Args: cobra.NoArgs,
			RunE: func(*cobra.Command, []string) error {
				if a.jsonOut() {
					// A script compares it with the controller's.
					return a.encodeJSON(map[string]any{"version": version.Version, "build": version.BuildNumber()})
				}
				_, err := fmt.Fprintln(a.out, "meshctl", version.String())
				return err
			},
		})
	root.Version = version.String()
	root.SetVersionTemplate("meshctl {{.Version}}\n")
	strictGroups(root)
	return root
}

// strictGroups makes every command that only groups others an error for an
// unknown word ("meshctl machines frob" would otherwise print the group's
// help and exit 0, so a script's typo would pass), and its help without
// one.
func strictGroups(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		strictGroups(sub)
	}
	if cmd.HasParent() && cmd.HasSubCommands() && !cmd.Runnable() {
		cmd.Args = cobra.NoArgs
		cmd.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	}
}

// jsonOut says whether -o json was asked for.
func (a *app) jsonOut() bool { return a.output == "json" }

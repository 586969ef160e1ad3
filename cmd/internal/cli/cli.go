// Package cli is what mesh-controller and mesh-host share on top of cobra:
// exit codes that tell a mistyped command line (2) from a failure (1), an
// unknown subcommand refused with a suggestion instead of falling through
// to a default, --version on every command, and the single-dash long flags
// (-data X) the standard flag package accepted before these commands moved
// to cobra, and the flag values both read (sizes, the log level).
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ExitUsage is the exit status of a command line that could not be run as
// written: an unknown command or flag, a missing argument.
const ExitUsage = 2

// UsageError is a command line that could not be run as written.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Errorf(format, a...)} }

// NoSubcommand is the Args of a command that runs itself when given no
// subcommand (mesh-controller serves): any word is a subcommand that does
// not exist, refused rather than ignored.
func NoSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	return unknown(cmd, args[0])
}

// NeedSubcommand is the RunE of a command that only groups others
// (mesh-controller user): without one of them it is a usage error, where
// cobra would print the help and exit 0.
func NeedSubcommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return Usagef("%s needs a subcommand", cmd.CommandPath())
	}
	return unknown(cmd, args[0])
}

func unknown(cmd *cobra.Command, name string) error {
	if cmd.SuggestionsMinimumDistance <= 0 {
		cmd.SuggestionsMinimumDistance = 2 // cobra sets it only on its own path
	}
	suggest := cmd.SuggestionsFor(name)
	var names []string
	for _, c := range cmd.Commands() {
		if !c.IsAvailableCommand() {
			continue
		}
		names = append(names, c.Name())
		// demo-typo, demo2: a known name with something after it.
		if strings.HasPrefix(strings.ToLower(name), c.Name()) && !slices.Contains(suggest, c.Name()) {
			suggest = append(suggest, c.Name())
		}
	}
	msg := fmt.Sprintf("unknown command %q for %q", name, cmd.CommandPath())
	if len(suggest) > 0 {
		return UsageError{fmt.Errorf("%s; did you mean %s?", msg, strings.Join(suggest, " or "))}
	}
	return UsageError{fmt.Errorf("%s; its commands: %s", msg, strings.Join(names, ", "))}
}

// Execute runs root on args and returns the error of the command line,
// a UsageError when it failed before any command ran. It prints nothing of
// the error itself: Exit does.
func Execute(ctx context.Context, root *cobra.Command, version string, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	root.SilenceErrors, root.SilenceUsage = true, true
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	// cobra answers --version only on a command with a Version; the flag is
	// persistent so that it works after a subcommand too.
	root.PersistentFlags().Bool("version", false, "print the version and exit")
	root.SetVersionTemplate(root.Name() + " {{.Version}}\n")
	walk(root, func(c *cobra.Command) { c.Version = version })
	// Every error before a command's RunE is the command line's: an
	// unknown word, a bad flag value, a missing argument.
	ran := false
	root.PersistentPreRun = func(*cobra.Command, []string) { ran = true }
	root.SetArgs(normalize(root, args))
	err := root.ExecuteContext(ctx)
	if err != nil && !ran && !errors.As(err, new(UsageError)) {
		err = UsageError{err}
	}
	return err
}

// Exit prints err for the person at the terminal and returns the exit
// status: 0, ExitUsage for a UsageError, else 1.
func Exit(name string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	if errors.As(err, new(UsageError)) {
		fmt.Fprintf(stderr, "Run '%s --help' for usage.\n", name)
		return ExitUsage
	}
	return 1
}

func walk(c *cobra.Command, fn func(*cobra.Command)) {
	fn(c)
	for _, sub := range c.Commands() {
		walk(sub, fn)
	}
}

// normalize turns -name into --name for every long flag of the tree: the
// standard flag package took both, and scripts written for it must keep
// working; pflag reads -name as the shorthands n, a, m, e.
func normalize(root *cobra.Command, args []string) []string {
	long := map[string]bool{"help": true, "version": true}
	walk(root, func(c *cobra.Command) {
		add := func(f *pflag.Flag) { long[f.Name] = true }
		c.LocalFlags().VisitAll(add)
		c.PersistentFlags().VisitAll(add)
	})
	out := make([]string, 0, len(args))
	for i, a := range args {
		if a == "--" {
			return append(out, args[i:]...)
		}
		if len(a) > 2 && a[0] == '-' && a[1] != '-' {
			name, _, _ := strings.Cut(a[1:], "=")
			if long[name] {
				a = "-" + a
			}
		}
		out = append(out, a)
	}
	return out
}

package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"mesh/agent"
	"mesh/cmd/internal/cli"
	"mesh/version"
)

// TestRunFlags_UnpackCeilings: run's flags set the unpack ceilings, sizes
// take KiB/MiB/GiB, and unset ones keep the defaults.
func TestRunFlags_UnpackCeilings(t *testing.T) {
	var cfg agent.Config
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	agentFlags(fs, &cfg)
	if err := fs.Parse([]string{"--unpack-max-bytes", "2GiB", "--unpack-max-file=512MiB", "--unpack-max-entries", "1000"}); err != nil {
		t.Fatal(err)
	}
	want := agent.UnpackLimits{MaxBytes: 2 << 30, MaxFileBytes: 512 << 20, MaxEntries: 1000, MaxRatio: agent.DefaultUnpackLimits().MaxRatio}
	if cfg.Unpack != want {
		t.Fatalf("limits %+v, want %+v", cfg.Unpack, want)
	}
	// launch hands its flags to run as --name=value: they must parse back.
	var again agent.Config
	fs2 := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	agentFlags(fs2, &again)
	var args []string
	fs.Visit(func(f *pflag.Flag) { args = append(args, "--"+f.Name+"="+f.Value.String()) })
	if err := fs2.Parse(args); err != nil || again.Unpack != want {
		t.Fatalf("round trip %v: %+v %v", args, again.Unpack, err)
	}
	for _, bad := range []string{"0", "-1", "1TiB", "x", "9999999999GiB"} {
		var b cli.ByteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("%q accepted as %d", bad, b)
		}
	}
}

// runHost runs one mesh-host command line and returns its exit status and
// output, as main would.
func runHost(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut strings.Builder
	err := run(t.Context(), args, &out, &errOut)
	return cli.Exit("mesh-host", err, &errOut), out.String(), errOut.String()
}

// TestHelp_ListsSubcommands: `mesh-host --help` said "unknown command"
// and exited 1; every command's --help now lists its flags and exits 0.
func TestHelp_ListsSubcommands(t *testing.T) {
	code, out, errOut := runHost(t, "--help")
	if code != 0 {
		t.Fatalf("--help: exit %d\n%s", code, errOut)
	}
	for _, want := range []string{"enroll", "run", "launch", "journal", "version", "--state"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help does not list %s:\n%s", want, out)
		}
	}
	for cmd, flag := range map[string]string{"enroll": "--join-token", "run": "--unpack-max-bytes", "launch": "--trial-deadline", "journal": "--json"} {
		code, out, errOut := runHost(t, cmd, "--help")
		if code != 0 || !strings.Contains(out, flag) || !strings.Contains(out, "--state") {
			t.Errorf("%s --help: exit %d, no %s or --state:\n%s%s", cmd, code, flag, out, errOut)
		}
	}
}

// TestFlagsAnywhere: --state before the subcommand, after it, or with the
// standard flag package's single dash.
func TestFlagsAnywhere(t *testing.T) {
	for name, args := range map[string][]string{
		"Before":     {"--state", "STATE", "run", "--wait", "1s"},
		"After":      {"run", "--state", "STATE", "--wait", "1s"},
		"SingleDash": {"run", "-state=STATE", "-wait", "1s"},
	} {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir() + "/nowhere"
			for i := range args {
				args[i] = strings.ReplaceAll(args[i], "STATE", state)
			}
			// Not enrolled there: the error names the state dir it was given.
			code, _, errOut := runHost(t, args...)
			if code != 1 || !strings.Contains(errOut, state) {
				t.Fatalf("exit %d, want 1 naming %s:\n%s", code, state, errOut)
			}
		})
	}
}

func TestUnknownCommand(t *testing.T) {
	code, _, errOut := runHost(t, "--state", t.TempDir(), "rnu")
	if code != cli.ExitUsage || !strings.Contains(errOut, `unknown command "rnu"`) || !strings.Contains(errOut, "did you mean run") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
	if code, _, _ := runHost(t); code != cli.ExitUsage {
		t.Fatalf("no subcommand: exit %d, want %d", code, cli.ExitUsage)
	}
	if code, _, _ := runHost(t, "run", "--no-such-flag"); code != cli.ExitUsage {
		t.Fatalf("unknown flag: exit %d, want %d", code, cli.ExitUsage)
	}
}

func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"run", "--version"}, {"version"}} {
		code, out, _ := runHost(t, args...)
		if code != 0 || out != "mesh-host "+version.String()+"\n" {
			t.Errorf("%v: exit %d, %q", args, code, out)
		}
	}
}

// TestLaunch_TrialLongerThanAPoll: a trial completes when a poll returns,
// so a trial deadline no longer than --wait failed every trial (a
// launcher's move too); launch refuses it at once, saying why.
func TestLaunch_TrialLongerThanAPoll(t *testing.T) {
	code, _, errOut := runHost(t, "--state", t.TempDir(), "launch", "--wait", "3m")
	if code != cli.ExitUsage || !strings.Contains(errOut, "--trial-deadline (2m0s) must be longer than --wait (3m0s)") {
		t.Fatalf("exit %d:\n%s", code, errOut)
	}
}

// TestByteSize_SaidAsGiven: a size flag's default is shown as it would be
// given (the help said "default 1048576" for a flag that takes MiB).
func TestByteSize_SaidAsGiven(t *testing.T) {
	for _, c := range []struct {
		in, want string
	}{{"1MiB", "1MiB"}, {"1048576", "1MiB"}, {"1536KiB", "1536KiB"}, {"1000", "1000"}, {"2GiB", "2GiB"}} {
		var b cli.ByteSize
		if err := b.Set(c.in); err != nil || b.String() != c.want {
			t.Errorf("%q is said %q (%v), want %q", c.in, b.String(), err, c.want)
		}
	}
}

// TestJournal_SaysWhatItRead: the journal of a directory that is no host's
// state is refused (it printed nothing and exited 0, as for a host that
// did nothing), and an enrolled host with no entries says so.
func TestJournal_SaysWhatItRead(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	if code, out, errOut := runHost(t, "journal", "--state", missing); code == 0 || !strings.Contains(errOut, "has no host.json: no host's state directory") {
		t.Fatalf("journal of %s: exit %d %q %q", missing, code, out, errOut)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "host.json"), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runHost(t, "journal", "--state", dir); code != 0 || !strings.Contains(out, "no entries yet") {
		t.Fatalf("journal of an enrolled host with none: exit %d %q", code, out)
	}
	if code, out, _ := runHost(t, "journal", "--json", "--state", dir); code != 0 || out != "" {
		t.Fatalf("journal --json of an enrolled host with none: exit %d %q", code, out)
	}
}

// TestRun_RefusesBeforeSayingItRuns: a state directory that is no host's
// is refused before "mesh-host running" is logged (it logged running, root
// /, then failed), and an unknown --log-level is refused, where it ran at
// info.
func TestRun_RefusesBeforeSayingItRuns(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nonexistent")
	code, _, errOut := runHost(t, "run", "--state", missing)
	if code == 0 || !strings.Contains(errOut, "has no host.json") || strings.Contains(errOut, "mesh-host running") {
		t.Fatalf("run on %s: exit %d %q", missing, code, errOut)
	}
	for _, cmd := range []string{"run", "launch"} {
		if code, _, errOut := runHost(t, cmd, "--state", t.TempDir(), "--log-level", "loud"); code != cli.ExitUsage || !strings.Contains(errOut, `--log-level "loud": debug, info, warn or error`) {
			t.Fatalf("%s --log-level loud: exit %d %q", cmd, code, errOut)
		}
	}
}

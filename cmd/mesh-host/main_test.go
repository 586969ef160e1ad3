package main

import (
	"flag"
	"io"
	"testing"

	"mesh/agent"
)

// TestRunFlags_UnpackCeilings: run's flags set the unpack ceilings, sizes
// take KiB/MiB/GiB, and unset ones keep the defaults.
func TestRunFlags_UnpackCeilings(t *testing.T) {
	var cfg agent.Config
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
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
	fs2 := flag.NewFlagSet("run", flag.ContinueOnError)
	fs2.SetOutput(io.Discard)
	agentFlags(fs2, &again)
	var args []string
	fs.Visit(func(f *flag.Flag) { args = append(args, "--"+f.Name+"="+f.Value.String()) })
	if err := fs2.Parse(args); err != nil || again.Unpack != want {
		t.Fatalf("round trip %v: %+v %v", args, again.Unpack, err)
	}
	for _, bad := range []string{"0", "-1", "1TiB", "x", "9999999999GiB"} {
		var b byteSize
		if err := b.Set(bad); err == nil {
			t.Errorf("%q accepted as %d", bad, b)
		}
	}
}

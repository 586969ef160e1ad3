package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"mesh/controller"
)

// TestAdvertiseEnv_CheckedAsTheFlag: MESH_ADVERTISE's names are trimmed
// and checked as --advertise's are. An untrimmed " ctl2.example.net"
// escaped the check that keeps a service certificate from naming the
// controller, while its serving certificate named ctl2 trimmed.
func TestAdvertiseEnv_CheckedAsTheFlag(t *testing.T) {
	parse := func(env string) (controller.Config, error) {
		t.Setenv("MESH_ADVERTISE", env)
		var cfg controller.Config
		fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
		err := tlsFlags(fs, &cfg)
		if perr := fs.Parse(nil); perr != nil {
			t.Fatal(perr)
		}
		return cfg, err
	}
	cfg, err := parse("ctl1.example.net, ctl2.example.net")
	if err != nil || strings.Join(cfg.Advertise, "|") != "ctl1.example.net|ctl2.example.net" {
		t.Fatalf("advertise %q, %v", cfg.Advertise, err)
	}
	if _, err := parse("https://ctl1.example.net:8443"); err == nil || !strings.Contains(err.Error(), "MESH_ADVERTISE: \"https://ctl1.example.net:8443\": a host name or an IP address, without scheme or port") {
		t.Fatalf("a URL in MESH_ADVERTISE: %v", err)
	}
}

package main

import (
	"strings"
	"testing"
	"time"

	"mesh/client"
)

// TestReleaseState_FailedSaysWhen: meshctl shows a failed release's state
// with when it failed (or that when was not recorded), never the word alone.
func TestReleaseState_FailedSaysWhen(t *testing.T) {
	at := time.Now().Add(-5 * time.Minute)
	for _, c := range []struct {
		r    client.Release
		want string
	}{
		{client.Release{State: client.ReleaseStateReady}, "ready"},
		{client.Release{State: client.ReleaseStateFailed, FailedAt: &at}, "failed 5m ago"},
		{client.Release{State: client.ReleaseStateFailed}, "failed (when not recorded)"},
	} {
		if got := releaseState(c.r); !strings.HasPrefix(got, c.want) {
			t.Errorf("%s at %v: %q, want %q", c.r.State, c.r.FailedAt, got, c.want)
		}
	}
}

// TestLauncherWords: meshctl machines show names the launcher running the
// host beside its version, and nothing for a host run without one.
func TestLauncherWords(t *testing.T) {
	if got := launcherWords(&client.Machine{LauncherVersion: "2.1.0"}); got != "; launcher 2.1.0" {
		t.Errorf("with a launcher: %q", got)
	}
	if got := launcherWords(&client.Machine{}); got != "" {
		t.Errorf("without one: %q", got)
	}
}

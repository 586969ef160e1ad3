package models_test

import (
	"strings"
	"testing"

	"mesh/models"
)

// TestShowable_BidiControlsEscaped: words from outside (a host's version
// and report reasons, a pusher's name, a ref) are not shown with the
// bidirectional controls in them: "\u202e0.3.1" was taken as a host
// version and shown as "1.3.0" while the controller compared what was
// sent.
func TestShowable_BidiControlsEscaped(t *testing.T) {
	v := "\u202e0.3.1"
	if err := models.ValidVersion("host_version", v, true); err == nil {
		t.Errorf("host version %q (shown as 1.3.0) is taken", v)
	}
	got := models.EscapeLogLine("alice\u202egnp.exe\u2066", 128)
	if strings.ContainsAny(got, "\u202e\u2066") || got != `alice\u202egnp.exe\u2066` {
		t.Errorf("EscapeLogLine: %q", got)
	}
	if err := models.ValidVersion("host_version", "1.5.0-βeta", true); err != nil {
		t.Errorf("a version of other letters: %v", err)
	}
}

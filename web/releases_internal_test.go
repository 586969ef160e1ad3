package web

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestReleasesPage_FailedSaysWhen: a failed release's state word comes
// with when it failed and why; one that failed before that was recorded
// says so rather than showing the word alone.
func TestReleasesPage_FailedSaysWhen(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 30, 0, 0, time.UTC)
	render := func(r models.Release) string {
		var buf bytes.Buffer
		if err := ReleasesPage(Page{}, []ReleaseRow{{Release: r}}, "").Render(context.Background(), &buf); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	failed := models.Release{Version: "6.0.0", OS: "linux", Arch: "amd64", State: models.ReleaseFailed, Failure: "machine m1 rolled back", FailedAt: &at}
	if out := render(failed); !strings.Contains(out, "Failed 2026-12-01 09:30:00Z:") || !strings.Contains(out, "machine m1 rolled back") {
		t.Fatalf("a failed release's page:\n%s", out)
	}
	failed.FailedAt = nil
	if out := render(failed); !strings.Contains(out, "Failed (when was not recorded):") {
		t.Fatalf("a release failed before failed_at:\n%s", out)
	}
	if out := render(models.Release{Version: "6.0.1", OS: "linux", Arch: "amd64", State: models.ReleaseReady}); strings.Contains(out, "Failed") {
		t.Fatalf("a ready release's page says failed:\n%s", out)
	}
}

package web

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"mesh/models"
)

// TestReportLine_BoundedWhateverTheReport: a host's report may hold a
// megabyte of actions and words; the machine's journal shows at most 50
// actions and 50 checks of it, each clipped, with control characters
// escaped, and says how many more there are (200 such reports once made
// a 96 MB page, refreshed every 2 s).
func TestReportLine_BoundedWhateverTheReport(t *testing.T) {
	rep := models.Report{Generation: 3, Outcome: models.OutcomeApplied}
	for range 3000 {
		rep.Actions = append(rep.Actions, models.Action{Resource: "web.conf", Action: "updated", Detail: strings.Repeat("x", 300) + "\x1b]0;title\x07"})
	}
	for range 60 {
		rep.Checks = append(rep.Checks, models.CheckResult{Resource: "web.check", OK: false, At: time.Now(), Detail: strings.Repeat("y", 2000)})
	}
	body, _ := json.Marshal(rep)
	l := reportLine(models.ReportRow{Outcome: models.OutcomeApplied, Reason: "\x1b[2K" + strings.Repeat("z", 10000), Body: string(body)})
	if len(l.Actions) != 51 || !strings.Contains(l.Actions[50], "2950 more") {
		t.Fatalf("%d actions shown, the last %q; want 50 and a line saying 2950 more", len(l.Actions), l.Actions[len(l.Actions)-1])
	}
	if len(l.Checks) != 51 || !strings.Contains(l.Checks[50], "10 more") {
		t.Fatalf("%d checks shown; want 50 and a line saying 10 more", len(l.Checks))
	}
	for _, s := range append(append([]string{l.Reason}, l.Actions...), l.Checks...) {
		if len(s) > 600 || strings.ContainsAny(s, "\x1b\x07") {
			t.Fatalf("shown: %d bytes, %q…", len(s), s[:min(len(s), 80)])
		}
	}
}

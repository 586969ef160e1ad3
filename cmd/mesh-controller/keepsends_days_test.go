package main

import (
	"strings"
	"testing"
	"time"
)

// TestKeepSends_ManyDaysNeverWrapToAShortKeep: --keep-sends in days was
// multiplied into a time.Duration unchecked, and past ~106,751 days (292
// years) it wrapped: 213504d kept 25 minutes (retention acted at once),
// 365000d a negative keep (retention off, the dashboard saying
// "--keep-sends 0"). Such a count is now refused.
func TestKeepSends_ManyDaysNeverWrapToAShortKeep(t *testing.T) {
	for _, v := range []string{"213504d", "3650000d", "365000d"} {
		var k keepDuration
		if err := k.Set(v); err != nil {
			if !strings.Contains(err.Error(), "at most") {
				t.Errorf("--keep-sends %s refused without saying the bound: %v", v, err)
			}
			continue
		}
		if d := time.Duration(k); d < 100*365*24*time.Hour {
			t.Errorf("--keep-sends %s taken as %s", v, d)
		}
	}
}

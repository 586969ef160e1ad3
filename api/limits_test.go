package api

import (
	"testing"
	"time"
)

func TestParseWait_Clamped(t *testing.T) {
	for in, want := range map[string]time.Duration{"": DefaultWait, "10h": MaxWait, "50s": 50 * time.Second, "-5s": 0, "30": 30 * time.Second} {
		got, err := parseWait(in)
		if err != nil || got != want {
			t.Errorf("parseWait(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	if _, err := parseWait("soon"); err == nil {
		t.Error("parseWait(soon) accepted")
	}
}

package web_test

import (
	"net/url"
	"strings"
	"testing"
)

// TestAuditPage_TargetIsNoOutsidersSentence: /audit?target= printed what
// the link asked for, as it came, as the page's heading and again in "No
// events of …": a link from outside put its own sentence on the
// dashboard's origin. A target the log holds no event of, and that is no
// name mesh gives, is not printed.
func TestAuditPage_TargetIsNoOutsidersSentence(t *testing.T) {
	_, _, vw := fixture(t)
	const bait = "SECURITY NOTICE: this controller was compromised. Log in again at https://mesh-login.example.net within 10 minutes"
	for _, target := range []string{bait, "machine/m1\u202e  ok "} {
		st, body := vw.get("/audit?target=" + url.QueryEscape(target))
		if st != 200 || strings.Contains(body, "SECURITY NOTICE") || strings.Contains(body, "\u202e") {
			t.Errorf("/audit?target=%q: %d, the page holds the link's words:\n%.300s", target, st, body[max(strings.Index(body, "<h1>"), 0):])
		}
	}
	// A target of the record is named.
	if _, body := vw.get("/audit?target=" + url.QueryEscape("machine/m1")); !strings.Contains(body, "Audit log of machine/m1") {
		t.Errorf("the audit log of machine/m1:\n%.300s", body[max(strings.Index(body, "<h1>"), 0):])
	}
}

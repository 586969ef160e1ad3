package api_test

import (
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestLogs_AnEscapedLongLineIsKeptClipped: the controller escapes the
// format characters a host left in a service's lines and then drops the
// oldest lines until the escaped lines fit models.MaxLogBytes, counting a
// byte a line for its newline. But each line is escaped and clipped to
// MaxLogBytes itself, so a line that escaped past it was MaxLogBytes long,
// counted MaxLogBytes+1, and was dropped too — the newest line, the one
// the lines were shipped for, and with it every older one: a service that
// restarted after printing a 12 KB line of Arabic-script format
// characters (a panic with its input) showed no lines at all, only
// "truncated". The newest line is kept, clipped.
func TestLogs_AnEscapedLongLineIsKeptClipped(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := doPoll(e, en.Token, 0, "5s")
		if p.status != 200 || p.send == "" {
			t.Fatalf("first poll: %d", p.status)
		}
		last := "panic: " + strings.Repeat("\u0600", 6000) // 12,007 bytes, within the bound as sent
		logs := []map[string]any{{"resource": "web.s", "why": "restarted", "lines": []string{"started", last}}}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied", "logs": logs})

		var l logList
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs", Token: e.Admin}, 200, &l)
		if len(l.Items) != 1 {
			t.Fatalf("%d services' lines kept, want 1", len(l.Items))
		}
		it := l.Items[0]
		if len(it.Lines) == 0 || !strings.HasPrefix(it.Lines[len(it.Lines)-1], "panic: ") {
			t.Fatalf("a service's last line (12,007 bytes as sent, escaped past the bound) was dropped with every line before it: %d lines kept, truncated %v", len(it.Lines), it.Truncated)
		}
	})
}

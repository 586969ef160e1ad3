package api_test

import (
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestLogs_EscapedLinesKeepTheirBound: a service's shipped lines are kept
// at most models.MaxLogBytes (16 KiB) a service, so a machine's kept lines
// stay within 1 MiB (MaxLogResources of them) and its page, refreshed every
// 2 s, with them. The bound was judged before the controller escaped a
// host's format characters (DecodeReport), and the escape makes a 2-byte
// U+0600 six bytes ("\u0600"): a host's 16 KiB of them was kept, and
// answered, as 48 KiB. The oldest lines go, marked truncated.
func TestLogs_EscapedLinesKeepTheirBound(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		p := doPoll(e, en.Token, 0, "5s")
		if p.status != 200 || p.send == "" {
			t.Fatalf("first poll: %d", p.status)
		}
		line := strings.Repeat("\u0600", 81) // 162 bytes, a Cf character each
		lines := make([]string, models.MaxLogLines)
		for i := range lines {
			lines[i] = line
		}
		var logs []map[string]any
		for i := range models.MaxLogServices {
			logs = append(logs, map[string]any{"resource": fmt.Sprintf("web.s%d", i), "why": "restarted", "lines": lines})
		}
		report(e, en.Token, map[string]any{"send": p.send, "generation": 1, "outcome": "applied", "logs": logs})

		var l logList
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/logs", Token: e.Admin}, 200, &l)
		if len(l.Items) != models.MaxLogServices {
			t.Fatalf("%d services' lines kept, want %d", len(l.Items), models.MaxLogServices)
		}
		for _, it := range l.Items {
			size := 0
			for _, s := range it.Lines {
				size += len(s) + 1
			}
			if size > models.MaxLogBytes {
				t.Fatalf("%s: %d bytes of lines kept and answered, over the %d a service's lines are bounded by", it.Resource, size, models.MaxLogBytes)
			}
		}
	})
}

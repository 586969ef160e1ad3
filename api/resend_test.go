package api_test

import (
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// TestPolls_OneGenerationSentAgainIsLimited: a host credential polling
// without If-None-Match, again and again, was answered 200 each time,
// each a send row (~240 a second). One generation is sent to its machine
// ten times at a poll's own asking, then refused (429, Retry-After) with
// nothing recorded but one audit row a minute; a new generation is sent
// at once.
func TestPolls_OneGenerationSentAgainIsLimited(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		en := e.Enroll("m1")
		codes := map[int]int{}
		var last string
		for range 30 {
			resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=0s", Token: en.Token})
			codes[resp.StatusCode]++
			if resp.StatusCode == 429 {
				last = string(b) + " Retry-After " + resp.Header.Get("Retry-After")
			}
		}
		var l struct{ Items []struct{ ID string } }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1/sends?limit=500", Token: e.Admin}, 200, &l)
		if codes[200] != 10 || codes[429] != 20 || len(l.Items) != 10 || !strings.Contains(last, "too many sends of one generation from machine m1") ||
			strings.HasSuffix(last, "Retry-After ") {
			t.Fatalf("30 polls without If-None-Match: %v, %d sends; %s", codes, len(l.Items), last)
		}
		var audit struct{ Items []struct{ Action string } }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=machine/m1", Token: e.Admin}, 200, &audit)
		refused := 0
		for _, a := range audit.Items {
			if a.Action == "poll-refused" {
				refused++
			}
		}
		if refused != 1 {
			t.Fatalf("%d poll-refused rows, want one", refused)
		}
		var m struct{ Generation int }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin}, 200, &m)
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/machines/m1/push", Token: e.Admin,
			Header: map[string]string{"If-Match": fmt.Sprintf(`"%d"`, m.Generation)}}, 200, nil)
		if resp, b := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=20s", Token: en.Token}); resp.StatusCode != 200 {
			t.Fatalf("a new generation: %d %s", resp.StatusCode, b)
		}
	})
}

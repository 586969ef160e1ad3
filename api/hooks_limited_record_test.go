package api_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"mesh/controller/ctltest"
)

// TestWebhooks_EveryBadSignatureIsCounted: 30 deliveries with a bad
// signature from one address, each refused (401, or 429 once the address's
// bad signatures are limited). Every refusal is to be on the record: a
// row, and the rows after it counting the rest. Those refused 429 were
// never counted: the record (written in full at a stop) said fewer
// deliveries were refused than were.
func TestWebhooks_EveryBadSignatureIsCounted(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
			Body: map[string]string{"name": "app", "kind": "gitea", "repository": "o/app", "default_branch": "main", "secret": hookSecret}}, 201, nil)
		ping := []byte(`{}`)
		refused, limited := 0, 0
		for i := range 30 {
			resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/app", Body: ping,
				Header: map[string]string{"X-Gitea-Event": "ping", "X-Gitea-Delivery": fmt.Sprintf("bad-%d", i), "X-Gitea-Signature": "00"}})
			switch resp.StatusCode {
			case 401:
				refused++
			case 429:
				refused++
				limited++
			default:
				t.Fatalf("bad signature %d: %d", i, resp.StatusCode)
			}
		}
		if err := e.Ctl.Server.RecordPendingRefusals(context.Background()); err != nil {
			t.Fatal(err)
		}
		var audit struct {
			Items []struct{ Action, Detail string }
		}
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?target=source/app", Token: e.Admin}, 200, &audit)
		more := regexp.MustCompile(`(\d+) more refused`)
		recorded := 0
		var rows []string
		for _, ev := range audit.Items {
			if ev.Action != "webhook-refused" {
				continue
			}
			rows = append(rows, ev.Detail)
			if m := more.FindStringSubmatch(ev.Detail); m != nil {
				n, _ := strconv.Atoi(m[1])
				recorded += n
			} else {
				recorded++
			}
		}
		if recorded != refused {
			t.Fatalf("%d deliveries refused (%d of them 429), %d on the record: %q", refused, limited, recorded, rows)
		}
	})
}

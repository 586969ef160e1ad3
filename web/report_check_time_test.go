package web_test

import (
	"strings"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/models"
	"mesh/store"
)

// TestMachinePage_ACheckIsDatedOnTheControllersClock: a host whose clock
// is two hours ahead says so with each report (X-Mesh-Host-Time), and the
// controller moves its checks' times to its own clock. The machine's
// journal on the dashboard dated each check by the report's body as sent:
// "check web.service: unhealthy (…) at <two hours from now>" — a check
// seen after the report that carried it was received.
func TestMachinePage_ACheckIsDatedOnTheControllersClock(t *testing.T) {
	for _, d := range []string{store.SQLite, store.Postgres} {
		t.Run(d, func(t *testing.T) {
			e := ctltest.Start(t, d)
			e.AddUser("vera", "viewer")
			vw := newBrowser(t, e.URL)
			vw.login("vera", "password-of-vera")
			en := e.Enroll("m1")
			resp, _ := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/host/declaration?wait=5s", Token: en.Token,
				Header: map[string]string{"X-Mesh-Host-Version": "1.6.0", "X-Mesh-Schema": "1"}})
			send := resp.Header.Get("X-Mesh-Send")
			ahead := time.Now().Add(2 * time.Hour).UTC()
			e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/host/reports", Token: en.Token,
				Header: map[string]string{models.HostTimeHeader: ahead.Format(time.RFC3339Nano)},
				Body: map[string]any{"send": send, "generation": 1, "outcome": "applied", "attempt": 1, "host_version": "1.6.0",
					"checks": []map[string]any{{"resource": "web.service", "ok": false, "at": ahead.Format(time.RFC3339Nano), "detail": "connection refused"}}}}, 201, nil)
			_, body := vw.get("/machines/m1")
			if !strings.Contains(body, "check web.service: unhealthy") {
				t.Fatalf("the journal does not show the check:\n%s", body)
			}
			if future := models.Stamp(ahead)[:16]; strings.Contains(body, "at "+future) {
				t.Fatalf("the journal dates the check %s, on the host's clock two hours ahead of the controller's (the report was received %s)",
					future, models.Stamp(time.Now()))
			}
		})
	}
}

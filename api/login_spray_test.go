package api_test

import (
	"fmt"
	"testing"
	"time"

	"mesh/controller/ctltest"
	"mesh/store"
)

// TestLogin_ThrottledAddressSprayingNamesIsNotARowEach: once an address
// was throttled, its attempts cost no password check and came as fast as
// the client sent them; each naming a user never named before was an audit
// row of its own (300 attempts, 305 rows: the record of refusals was the
// flood). An address over its own limit is one row a minute.
func TestLogin_ThrottledAddressSprayingNamesIsNotARowEach(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	login := func(user string) int {
		resp, _ := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/auth/login",
			Body: map[string]string{"username": user, "password": "a-wrong-password"}, Header: map[string]string{"X-Real-Ip": "192.0.2.7"}})
		return resp.StatusCode
	}
	// Spend the address's burst (20 failures).
	for i := range 25 {
		login(fmt.Sprintf("guess%d", i))
	}
	const n = 300
	throttled := 0
	start := time.Now()
	for i := range n {
		if login(fmt.Sprintf("spray%d", i)) == 429 {
			throttled++
		}
	}
	took := time.Since(start)
	var audit struct {
		Items []struct{ Action, Target string }
	}
	e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/audit?action=login-throttled&limit=1000", Token: e.Admin}, 200, &audit)
	t.Logf("%d of %d attempts throttled in %s from one address; %d login-throttled audit rows", throttled, n, took, len(audit.Items))
	if throttled < n/2 { // the address earns one attempt back every 3 s: a slow run gets a few through
		t.Fatalf("only %d of %d attempts from a throttled address were throttled", throttled, n)
	}
	if len(audit.Items) > 5 {
		t.Fatalf("%d throttled logins from one address, each naming another user, wrote %d audit rows; want a few (one a minute per address)", throttled, len(audit.Items))
	}
}

package agent

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
)

// A report answered 404 or 403 by a proxy between (a page of its own, not
// the controller's problem+json) was taken as the controller's refusal:
// moved to the journal, never sent again, and the controller never heard
// of the apply. Only the controller's words refuse a report.
func TestReport_AProxysRefusalIsNotTheControllers(t *testing.T) {
	for _, tc := range []struct {
		status  int
		ct      string
		refused bool
	}{
		{http.StatusNotFound, "text/html", false},
		{http.StatusForbidden, "text/plain", false},
		{http.StatusRequestEntityTooLarge, "", false},
		{http.StatusBadRequest, "application/problem+json", true},
		{http.StatusConflict, "application/problem+json", true},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if tc.ct != "" {
				w.Header().Set("Content-Type", tc.ct)
			}
			w.WriteHeader(tc.status)
			_, _ = w.Write([]byte(`{"title": "x", "detail": "y"}`))
		}))
		c := newClient(&Identity{Controllers: []string{srv.URL}, Token: "t"})
		err := c.postReport(context.Background(), []byte(`{}`))
		srv.Close()
		var refused *reportRefused
		if got := errors.As(err, &refused); got != tc.refused {
			t.Errorf("%d %q: taken as the controller's refusal: %v (%v)", tc.status, tc.ct, got, err)
		}
	}
}

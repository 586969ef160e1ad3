package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/hub"
	"mesh/models"
)

type refusalStore struct {
	Store
	rows []string
}

func (f *refusalStore) Enroll(ctx context.Context, tokenHash, name, os, arch, hostVersion, schema, tokenID string) (*models.Machine, error) {
	return nil, models.ErrTokenUsed
}

func (f *refusalStore) Audit(ctx context.Context, actor, action, target, detail string) error {
	f.rows = append(f.rows, action+" "+target+": "+detail)
	return nil
}

// TestRefusals_OverdueRowNamesWhatWasRefused: refused enrolments are kept
// sparse by the sender's address. Behind one address web1 is refused, then
// web2 and web3 within the minute, then silence: the row written a minute
// on put web2's and web3's refusals on machine/web1's record. It names the
// address and what was counted; a stopping controller writes what is
// counted however recent.
func TestRefusals_OverdueRowNamesWhatWasRefused(t *testing.T) {
	fs := &refusalStore{}
	s := NewServer(fs, hub.New(nil, nil, "", nil), nil, nil, nil, "", nil, nil)
	now := time.Now()
	s.refusals.Now = func() time.Time { return now }
	e := echo.New()
	for _, name := range []string{"web1", "web2", "web3"} {
		req := httptest.NewRequest(http.MethodPost, "/api/v1/enroll",
			strings.NewReader(`{"join_token":"x","name":"`+name+`","os":"linux","arch":"amd64"}`))
		req.Header.Set("Content-Type", "application/json")
		req.RemoteAddr = "198.51.100.7:4000"
		c := e.NewContext(req, httptest.NewRecorder())
		if err := s.enroll(c); err == nil {
			t.Fatalf("%s enrolled", name)
		}
	}
	now = now.Add(time.Minute)
	if err := s.RecordOverdueRefusals(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range fs.rows {
		t.Logf("row: %s", r)
	}
	last := fs.rows[len(fs.rows)-1]
	if len(fs.rows) != 2 || !strings.HasPrefix(last, "enroll-refused address/198.51.100.7: 2 more refused (enrolments from 198.51.100.7, whatever machine each named) after the record of ") {
		t.Fatalf("rows: %q", fs.rows)
	}
	req := httptest.NewRequest(http.MethodPost, "/api/v1/enroll", strings.NewReader(`{"join_token":"x","name":"web4","os":"linux","arch":"amd64"}`))
	req.Header.Set("Content-Type", "application/json")
	req.RemoteAddr = "198.51.100.7:4000"
	_ = s.enroll(e.NewContext(req, httptest.NewRecorder()))
	if err := s.RecordOverdueRefusals(context.Background()); err != nil || len(fs.rows) != 2 {
		t.Fatalf("within the minute: %v %q", err, fs.rows)
	}
	if err := s.RecordPendingRefusals(context.Background()); err != nil || len(fs.rows) != 3 || !strings.Contains(fs.rows[2], "1 more refused") {
		t.Fatalf("at a stop: %v %q", err, fs.rows)
	}
}

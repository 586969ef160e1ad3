package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEnroll_RefusesBeforeSending: URLs that would expose the join token
// are refused before any connection, and nothing is written.
func TestEnroll_RefusesBeforeSending(t *testing.T) {
	pin := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		urls []string
		pin  string
		want string
	}{
		{"PlainHTTPOffLoopback", []string{"http://10.0.0.5:8080"}, "", "refusing http://10.0.0.5:8080: plain HTTP"},
		{"PlainHTTPByName", []string{"http://127.0.0.1:8080", "http://ctl.example.net:8080"}, "", "refusing http://ctl.example.net:8080"},
		{"HTTPSWithoutPin", []string{"https://ctl.example.net:8443"}, "", "needs --ca-pin"},
		{"PinWithPlainHTTP", []string{"http://127.0.0.1:8080"}, pin, "the URL is plain http://"},
		{"BadPin", []string{"https://ctl.example.net:8443"}, "sha256:abc", "want sha256: and 64 hex"},
		{"NoScheme", []string{"ctl.example.net:8443"}, pin, "want http(s)://host:port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "state")
			_, err := Enroll(context.Background(), Enrolment{Controllers: tc.urls, JoinToken: "tok", CAPin: tc.pin, Name: "m1", StateDir: state})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want %q", err, tc.want)
			}
			if _, err := os.Stat(state); !os.IsNotExist(err) {
				t.Fatalf("the state dir was made: %v", err)
			}
		})
	}
}

// TestEnroll_RefusedLeavesNoStateDir: an enrolment the controller
// refuses (or cannot be reached for) leaves no empty state directory
// behind; a directory that was there before stays.
func TestEnroll_RefusedLeavesNoStateDir(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"type":"urn:mesh:problem:join-token-refused","title":"Join token refused","status":403,"detail":"join token is used, revoked, expired or unknown"}`))
	}))
	defer srv.Close()
	state := filepath.Join(t.TempDir(), "state")
	if _, err := Enroll(context.Background(), Enrolment{Controllers: []string{srv.URL}, JoinToken: "tok", Name: "m1", StateDir: state}); err == nil {
		t.Fatal("a refused enrolment succeeded")
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("a refused enrolment left its state dir: %v", err)
	}
	kept := t.TempDir()
	if _, err := Enroll(context.Background(), Enrolment{Controllers: []string{srv.URL}, JoinToken: "tok", Name: "m1", StateDir: kept}); err == nil {
		t.Fatal("a refused enrolment succeeded")
	}
	if _, err := os.Stat(kept); err != nil {
		t.Fatalf("a refused enrolment removed a directory it did not make: %v", err)
	}
}

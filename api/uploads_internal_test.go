package api

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// TestBodyLimit_MaxUpload: an upload's body is capped by Server.MaxUpload
// (--max-upload), and a body past it is 413; other bodies keep the JSON cap.
func TestBodyLimit_MaxUpload(t *testing.T) {
	s := &Server{MaxUpload: 4 << 10}
	read := func(path string, n int) error {
		e := echo.New()
		req := httptest.NewRequest("POST", path, strings.NewReader(strings.Repeat("x", n)))
		req.ContentLength = -1 // streamed: the cap is found while reading
		c := e.NewContext(req, httptest.NewRecorder())
		c.SetPath(path)
		return s.bodyLimit(func(c echo.Context) error {
			_, err := io.ReadAll(c.Request().Body)
			return err
		})(c)
	}
	if err := read("/api/v1/host-releases", 4<<10); err != nil {
		t.Fatalf("an upload at the cap: %v", err)
	}
	err := read("/api/v1/host-releases", 4<<10+1)
	if p := problemOf(err); p.Status != http.StatusRequestEntityTooLarge {
		t.Fatalf("an upload past the cap: %v (%d)", err, p.Status)
	}
	if err := read("/api/v1/builds/:id/artifact", 8<<10); err == nil {
		t.Fatal("a builder's artifact past the cap was read")
	}
	if (&Server{}).MaxUpload != 0 || DefaultMaxUpload != 512<<20 {
		t.Fatal("the default cap is 512 MiB")
	}
}

// TestProblem_StorageFull: a write the store's disk had no room for is
// 507, saying so, without the store's own words.
func TestProblem_StorageFull(t *testing.T) {
	err := fmt.Errorf("store chunk 3 of an upload: %w", fmt.Errorf("%w (%w)", models.ErrStorageFull, errors.New(`could not extend file "base/1/2"`)))
	p := problemOf(err)
	if p.Status != http.StatusInsufficientStorage || p.Type != ProblemType("storage-full") || !strings.Contains(p.Detail, "out of disk space") || strings.Contains(p.Detail, "base/1/2") {
		t.Fatalf("%+v", p)
	}
}

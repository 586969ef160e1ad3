package api

import (
	"errors"
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// FuzzParseETagGen: a host's If-None-Match. What is taken is a
// generation (never negative) that the host's own form gives back.
func FuzzParseETagGen(f *testing.F) {
	for _, s := range []string{``, `"42"`, `W/"42"`, ` "0" `, `42`, `"-1"`, `"9223372036854775807"`, `"9223372036854775808"`, `""`, `"4 2"`, `*`, `"1", "2"`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		n, err := parseETagGen(h)
		if err != nil {
			if !errors.Is(err, models.ErrInvalid) {
				t.Fatalf("%q: %v is not ErrInvalid", h, err)
			}
			return
		}
		if n < 0 {
			t.Fatalf("%q: negative generation %d taken", h, n)
		}
		if h == "" && n != 0 {
			t.Fatalf("absent header gave %d", n)
		}
		for _, form := range []string{`"%d"`, `W/"%d"`} {
			if back, err := parseETagGen(fmt.Sprintf(form, n)); err != nil || back != n {
				t.Fatalf("%q gave %d, but "+form+" gives %d, %v", h, n, n, back, err)
			}
		}
	})
}

// FuzzIfMatch: a person's If-Match on a write to a machine's desired
// state. Absent is nil; what is taken round-trips through the ETag the
// server sets.
func FuzzIfMatch(f *testing.F) {
	for _, s := range []string{``, `"42"`, `42`, ` "7" `, `W/"42"`, `"-3"`, `"x"`, `*`, `"99999999999999999999"`} {
		f.Add(s)
	}
	e := echo.New()
	f.Fuzz(func(t *testing.T, h string) {
		req := httptest.NewRequest("PUT", "/api/v1/machines/m1/assignments", nil)
		if h != "" {
			req.Header["If-Match"] = []string{h}
		}
		c := e.NewContext(req, httptest.NewRecorder())
		n, err := ifMatch(c)
		if err != nil {
			if n != nil || !errors.Is(err, models.ErrInvalid) {
				t.Fatalf("%q: %v, %v", h, n, err)
			}
			return
		}
		if (h == "") != (n == nil) {
			t.Fatalf("%q gave %v", h, n)
		}
		if n == nil {
			return
		}
		rec := httptest.NewRecorder()
		setETag(e.NewContext(req, rec), *n)
		req2 := httptest.NewRequest("PUT", "/", nil)
		req2.Header.Set("If-Match", rec.Header().Get("ETag"))
		back, err := ifMatch(e.NewContext(req2, httptest.NewRecorder()))
		if err != nil || back == nil || *back != *n {
			t.Fatalf("%q gave %d; its ETag %s gives %v, %v", h, *n, rec.Header().Get("ETag"), back, err)
		}
	})
}

// FuzzParseWait: ?wait= on the long poll is clamped to 0..MaxWait.
func FuzzParseWait(f *testing.F) {
	for _, s := range []string{"", "50s", "10h", "-5s", "30", "1e3", "soon", "9223372036854775807", "-9223372036854775808ns"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseWait(s)
		if err != nil {
			if !errors.Is(err, models.ErrInvalid) {
				t.Fatalf("%q: %v", s, err)
			}
			return
		}
		if d < 0 || d > MaxWait {
			t.Fatalf("%q gave %v, outside 0..%v", s, d, MaxWait)
		}
	})
}

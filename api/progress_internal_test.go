package api

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// deadlineRecorder is a response writer that records its writes' sizes
// and the write deadlines it is given.
type deadlineRecorder struct {
	*httptest.ResponseRecorder
	writes    []int
	deadlines int
}

func (r *deadlineRecorder) Write(p []byte) (int, error) {
	r.writes = append(r.writes, len(p))
	return r.ResponseRecorder.Write(p)
}

func (r *deadlineRecorder) SetWriteDeadline(time.Time) error { r.deadlines++; return nil }

// A large answer written in one call (c.JSON, a page) reaches the socket
// in pieces, each given the idle time when it starts (at most once a
// thirtieth of it): the whole answer was one write under one deadline, so
// a client slower than its size over the idle time was cut while reading.
func TestProgressWriter_LargeWriteInPieces(t *testing.T) {
	rec := &deadlineRecorder{ResponseRecorder: httptest.NewRecorder()}
	idle := 30 * time.Second
	w := &progressWriter{ResponseWriter: rec, rc: http.NewResponseController(rec), idle: &idle}
	body := make([]byte, 5*progressChunk+7)
	if n, err := w.Write(body); n != len(body) || err != nil {
		t.Fatalf("wrote %d, %v", n, err)
	}
	if len(rec.writes) != 6 || rec.writes[5] != 7 || rec.Body.Len() != len(body) {
		t.Fatalf("writes %v (%d bytes in all), want five of %d and one of 7", rec.writes, rec.Body.Len(), progressChunk)
	}
	for _, n := range rec.writes[:5] {
		if n != progressChunk {
			t.Fatalf("writes %v", rec.writes)
		}
	}
	if rec.deadlines == 0 {
		t.Fatal("no write deadline given")
	}
}

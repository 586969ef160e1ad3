package api

import (
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/conns"
	"mesh/models"
)

func (s *Server) listInstances(c echo.Context) error {
	limit, _, err := page(c)
	if err != nil {
		return err
	}
	is, err := s.Store.Instances(c.Request().Context(), limit)
	if err != nil {
		return err
	}
	now := s.Now()
	out := make([]models.Instance, len(is))
	for i := range is {
		out[i] = is[i].Observed(now)
	}
	return c.JSON(http.StatusOK, List[models.Instance]{Items: out})
}

func (s *Server) listAudit(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	var f models.AuditFilter
	for _, q := range []struct {
		name string
		to   *string
	}{{"target", &f.Target}, {"action", &f.Action}, {"actor", &f.Actor}} {
		if *q.to = c.QueryParam(q.name); len(*q.to) > models.MaxAuditTarget {
			return models.Invalid(q.name, fmt.Sprintf("at most %d characters", models.MaxAuditTarget))
		}
	}
	es, err := s.Store.AuditEventsWhere(c.Request().Context(), limit, cur, f)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(es, limit, func(e models.AuditEvent) string { return strconv.FormatInt(e.ID, 10) }))
}

// getBlob serves a content-addressed artifact with ETag and Range, read
// from the store a chunk at a time. A host may read only blobs a
// declaration of its machine named.
func (s *Server) getBlob(c echo.Context) error {
	d := c.Param("digest")
	if !models.ValidDigest(d) {
		return models.Invalid("digest", "sha256:<64 hex digits>")
	}
	ctx := c.Request().Context()
	if p := principal(c); p.Machine != "" {
		ok, err := s.Store.BlobSent(ctx, p.hostID, d)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no declaration of machine %s names %s", models.ErrForbidden, p.Machine, d)
		}
	}
	return s.serveBlob(c, d)
}

// serveBlob answers a blob's bytes (or a range of them) by its digest.
func (s *Server) serveBlob(c echo.Context, d string) error {
	b, content, err := s.Store.OpenBlob(c.Request().Context(), d)
	if err != nil {
		return err
	}
	return s.serveBlobFrom(c, d, b, content)
}

// serveBlobFrom answers blob b's bytes (or a range of them) from content.
func (s *Server) serveBlobFrom(c echo.Context, d string, b *models.Blob, content io.ReadSeeker) error {
	h := c.Response().Header()
	h.Set("ETag", `"`+d+`"`)
	h.Set("Digest", "sha-256="+d[7:])
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	h.Set(echo.HeaderContentType, "application/octet-stream")
	// A suffix range of length 0 ("bytes=-0") is unsatisfiable (RFC 9110
	// 14.1.2), but net/http answers it 206 with "bytes 1000-999/1000"
	// (found by FuzzBlobRange): such ranges are dropped first, and a
	// request left with none is answered 416.
	if rh := c.Request().Header.Get("Range"); rh != "" {
		kept, ok := dropEmptySuffixRanges(rh)
		switch {
		case !ok:
			h.Set("Content-Range", fmt.Sprintf("bytes */%d", b.Size))
			return c.NoContent(http.StatusRequestedRangeNotSatisfiable)
		case strings.Count(kept, ",") >= maxRanges:
			// Served whole, as if no range were asked (nginx's
			// max_ranges): each range re-reads its chunk, and a header of
			// 30,000 one-byte ranges kept a core busy for 30 s.
			c.Request().Header.Del("Range")
		default:
			c.Request().Header.Set("Range", kept)
		}
	}
	// content reads only the chunks the request's range touches, one at a
	// time; If-None-Match and If-Range are judged against the ETag. Each
	// write must make progress within BlobWriteIdle (writeProgress): a
	// client that stops reading would hold the connection and its chunk's
	// buffer for good, and a binary's digest is public (install.sh).
	http.ServeContent(c.Response(), c.Request(), strings.ReplaceAll(d, ":", "-"), b.CreatedAt, content)
	return nil
}

// BlobWriteIdle is how long a blob's download may go without taking any of
// its bytes before its connection is cut (tests shorten it).
var BlobWriteIdle = 30 * time.Second

// ResponseWriteIdle is how long any other response may go without taking
// any of its bytes before its connection is cut (tests shorten it).
var ResponseWriteIdle = 30 * time.Second

// progressWriter gives each write of a response its idle time to finish.
type progressWriter struct {
	http.ResponseWriter
	rc   *http.ResponseController
	idle *time.Duration // ResponseWriteIdle, or BlobWriteIdle for a blob
	set  time.Time      // when the deadline was last moved
	// body is the request's body, when it has one, and headed whether the
	// header was given yet.
	body   *eofBody
	headed bool
}

// eofBody says whether its body was read to its end.
type eofBody struct {
	io.ReadCloser
	ended bool
}

func (b *eofBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.ended = true
	}
	return n, err
}

// UnreadBodyWait bounds how long net/http may go on reading a request
// body the handler did not read to its end (one refused before it was
// read), once the answer is given.
const UnreadBodyWait = 2 * time.Second

// head runs as the response's header is given. net/http then reads what
// is left of the request body, up to 256 KiB, so that the client, which
// may send it whole before it reads, takes the answer rather than a reset,
// and the connection can serve another request; past that, or if it
// fails, it closes the connection after the answer. A body that never
// comes (a GET announcing one, a request refused before its body was
// read) held the answer back, and the connection, for the body's deadline
// — for good, for a GET, which had none. Now it waits UnreadBodyWait.
func (w *progressWriter) head() {
	if w.headed {
		return
	}
	w.headed = true
	if w.body != nil && !w.body.ended {
		_ = w.rc.SetReadDeadline(time.Now().Add(UnreadBodyWait))
	}
}

// deadline moves the write deadline to the idle time from now, unless it
// was moved within the last thirtieth of it: a timer's update costs ~1 µs,
// and a response of many writes would pay it for each.
func (w *progressWriter) deadline() error {
	d := *w.idle
	now := time.Now()
	if now.Sub(w.set) < d/30 {
		return nil
	}
	w.set = now
	return w.rc.SetWriteDeadline(now.Add(d))
}

// progressChunk is the most of a write given one deadline: a page written
// in one call (c.JSON, a dashboard page) is bounded by its progress, not
// cut for a client slower than its size over the idle time.
const progressChunk = 64 << 10

func (w *progressWriter) Write(p []byte) (int, error) {
	w.head()
	n := 0
	for n < len(p) {
		if err := w.deadline(); err != nil {
			return n, err
		}
		k, err := w.ResponseWriter.Write(p[n:min(len(p), n+progressChunk)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// WriteHeader gives the header, and a response without a body, the same
// time: net/http writes it when the handler returns.
func (w *progressWriter) WriteHeader(code int) {
	w.head()
	_ = w.deadline()
	w.ResponseWriter.WriteHeader(code)
}

// writeProgress gives each write of every response ResponseWriteIdle to
// make progress. The server has no write timeout (a long poll waits longer
// than any), so a client that asked for a response larger than its socket
// buffers take (openapi.yaml, to anyone), or for many small ones on one
// connection, and then read nothing held its connection, a goroutine and a
// slot of the connection cap for good: a slot a request, with nothing more
// to send. The header is bounded too (WriteHeader): net/http writes it,
// and an answer without a body, after the handler returns (and clears the
// deadline once the answer is written). A parked poll's answer has a bound of its own
// (writeAnswer); a blob's download is given BlobWriteIdle.
//
// It watches the request's body too: whether it was read to its end
// (head), and, past the connection cap, it counts the connection idle
// while the body trickles in on a connection no credential was proved on
// yet (a login's, a webhook's, a dashboard form's read for its CSRF token
// before the session is checked), so that such a body does not hold a slot
// (conns.IdleUntilRead).
func writeProgress(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		w := c.Response().Writer
		pw := &progressWriter{ResponseWriter: w, rc: http.NewResponseController(w), idle: &ResponseWriteIdle}
		if p := c.Path(); p == "/api/v1/blobs/:digest" || p == "/install/mesh-host/:digest" {
			pw.idle = &BlobWriteIdle
		}
		if r := c.Request(); r.ContentLength != 0 {
			defer conns.IdleUntilRead(r)()
			pw.body = &eofBody{ReadCloser: r.Body}
			r.Body = pw.body
		}
		c.Response().Writer = pw
		return next(c)
	}
}

func (w *progressWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxRanges is the most ranges one request is answered by; a resuming
// download asks for one.
const maxRanges = 16

// dropEmptySuffixRanges removes zero-length suffix ranges ("-0") from a
// Range header; ok is false when it held nothing else.
func dropEmptySuffixRanges(h string) (kept string, ok bool) {
	spec, isBytes := strings.CutPrefix(strings.TrimSpace(h), "bytes=")
	if !isBytes {
		return h, true // not ours to judge: net/http ignores it
	}
	var out []string
	for _, r := range strings.Split(spec, ",") {
		r = textproto.TrimString(r)
		// Split and trimmed as net/http reads a spec: "- 0" is "-0" too.
		start, n, _ := strings.Cut(r, "-")
		if n = textproto.TrimString(n); textproto.TrimString(start) == "" && n != "" && strings.Trim(n, "0") == "" {
			continue
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return "", false
	}
	return "bytes=" + strings.Join(out, ","), true
}

package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"mesh/client"
	"mesh/meshca"
	"mesh/models"
	"mesh/version"
)

// apiClient is the generated client for the target controller, with the
// token sent on every request.
func (a *app) apiClient() (*client.ClientWithResponses, error) {
	url, token, ca, err := a.target()
	if err != nil {
		return nil, err
	}
	return newClient(url, token, ca)
}

// newClient talks to url; with caPEM (the mesh CA found by its pin at
// login) it trusts that CA alone, else the system's roots.
func newClient(url, token string, caPEM []byte) (*client.ClientWithResponses, error) {
	var tlsConf *tls.Config
	if len(caPEM) > 0 {
		ca, err := meshca.ParsePEM(caPEM)
		if err != nil {
			return nil, fmt.Errorf("the saved mesh CA: %w (log in again with --ca-pin)", err)
		}
		tlsConf = meshca.ClientConfig(ca)
		tlsConf.NextProtos = nil // the API speaks HTTP/2 too; only the host protocol is pinned to HTTP/1.1
	}
	hc := &http.Client{CheckRedirect: keepRedirect, Transport: &http.Transport{
		TLSClientConfig:       tlsConf,
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialIdle,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute, // an upload is stored before the answer
	}}
	return client.NewClientWithResponses(url, client.WithHTTPClient(hc),
		client.WithRequestEditorFn(func(_ context.Context, req *http.Request) error {
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			req.Header.Set("User-Agent", "meshctl/"+version.Version)
			watchAnswer(req)
			return nil
		}))
}

// idleTimeout bounds each write of a request and each read of an
// answer: the transport's
// ResponseHeaderTimeout covers only the wait for an answer's headers, so a
// controller (or anything between) that sent them and then stalled held
// meshctl for good in the read of the body. The reads are timed only once
// the answer has begun (watchAnswer): the transport reads each connection
// from the moment it is made, and a deadline on that read cut an upload
// still making progress. An answer that makes progress is never cut.
var idleTimeout = 2 * time.Minute

// dialIdle dials the controller, on a connection whose reads an answer
// times (idleConn).
func dialIdle(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok {
		// A blocked write wakes once half its queue has drained: a queue
		// grown to megabytes would take a slow link longer than
		// idleTimeout to drain half of, and a write making progress be
		// cut. A megabyte drains by half in two minutes at 4 KiB/s.
		_ = tc.SetWriteBuffer(1 << 20)
	}
	return &idleConn{Conn: c, idle: idleTimeout}, nil
}

// idleConn moves its read deadline on at every read while it is armed:
// from its answer's first byte until the connection is taken for the next
// request.
type idleConn struct {
	net.Conn
	idle time.Duration

	mu    sync.Mutex
	armed bool
}

func (c *idleConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	if c.armed {
		if err := c.Conn.SetReadDeadline(time.Now().Add(c.idle)); err != nil {
			c.mu.Unlock()
			return 0, err
		}
	}
	c.mu.Unlock()
	return c.Conn.Read(p)
}

// Write writes p in pieces, each of which must be taken within
// idleTimeout: a controller (or a proxy) that stopped reading an upload
// held meshctl in its write for good, the transport's header timeout
// starting only once the body is written whole.
func (c *idleConn) Write(p []byte) (int, error) {
	const piece = 16 << 10
	n := 0
	for n < len(p) {
		if err := c.Conn.SetWriteDeadline(time.Now().Add(c.idle)); err != nil {
			return n, err
		}
		k, err := c.Conn.Write(p[n:min(len(p), n+piece)])
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// arm starts (or, for a request about to be written, stops) timing the
// reads, the one already waiting included.
func (c *idleConn) arm(on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = on
	d := time.Time{}
	if on {
		d = time.Now().Add(c.idle)
	}
	_ = c.Conn.SetReadDeadline(d)
}

// watchAnswer times the reads of req's answer on the connection it is
// written to, from the answer's first byte (the wait for it is the
// transport's ResponseHeaderTimeout: an upload is stored before the answer).
func watchAnswer(req *http.Request) {
	var conn *idleConn
	trace := &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			c := i.Conn
			if tc, ok := c.(*tls.Conn); ok {
				c = tc.NetConn()
			}
			if ic, ok := c.(*idleConn); ok {
				conn = ic
				ic.arm(false)
			}
		},
		GotFirstResponseByte: func() {
			if conn != nil {
				conn.arm(true)
			}
		},
	}
	*req = *req.WithContext(httptrace.WithClientTrace(req.Context(), trace))
}

// problemError is a problem+json answer (RFC 9457), shown as its title and
// detail.
type problemError struct {
	Status int
	client.Problem
}

func (p *problemError) Error() string {
	s := p.Title
	if p.Detail != nil && *p.Detail != "" {
		// A detail that has the title's words says them once
		// ("Conflict: conflict: …", "Not found: machine m1: not found",
		// "Cannot be composed: generation 2 cannot be composed: …" read
		// as a stutter).
		lower, title := strings.ToLower(*p.Detail), strings.ToLower(p.Title)
		if strings.Contains(lower, title) {
			s = *p.Detail
		} else {
			s += ": " + *p.Detail
		}
	}
	if p.Status == http.StatusUnauthorized {
		s += " (" + loginHint + ")"
	}
	return s
}

// loginHint is what a 401 suggests; target says which controller (and
// whether the saved login is another's).
var loginHint = "log in again: meshctl login URL --user NAME"

// reach wraps an error of the request itself: the controller was not
// reached, or its answer could not be read.
func reach(err error) error {
	var unknown x509.UnknownAuthorityError
	if errors.As(err, &unknown) {
		// A controller serving TLS under the mesh's own CA, which nothing
		// here trusts yet: say how to trust it.
		return fmt.Errorf("talking to the controller: %w; if it serves TLS under the mesh's own CA, log in with "+
			"--ca-pin sha256:… (its start message and every join token's answer give the pin)", err)
	}
	return fmt.Errorf("talking to the controller: %w", err)
}

// expect checks an answer's status: a problem+json answer becomes a
// problemError; any other unexpected answer says its status.
func expect(hr *http.Response, body []byte, want ...int) error {
	if slices.Contains(want, hr.StatusCode) {
		if hr.StatusCode == http.StatusNoContent || isJSON(hr.Header.Get("Content-Type")) {
			return nil
		}
		// The status asked for, but not the API's JSON: a web server's
		// catch-all page, or a proxy's (meshctl said "revoked" of a
		// machine nothing revoked, exit 0, and other commands crashed
		// on the answer they could not read).
		return &notTheAPI{fmt.Sprintf("%s %s was answered %s in %s, not the controller API's JSON: is %s://%s the controller (or a proxy, or another server)? %.120q",
			hr.Request.Method, hr.Request.URL.Path, hr.Status, orWord(hr.Header.Get("Content-Type"), "no content type"),
			hr.Request.URL.Scheme, hr.Request.URL.Host, body)}
	}
	if hr.StatusCode >= 300 && hr.StatusCode < 400 {
		return &notTheAPI{fmt.Sprintf("%s %s was answered %s to %s: the controller's API never redirects; a proxy in front of it (its login page?) or another server answered. Use the controller's own URL",
			hr.Request.Method, hr.Request.URL.Path, hr.Status, orWord(hr.Header.Get("Location"), "nowhere"))}
	}
	var p client.Problem
	if strings.HasPrefix(hr.Header.Get("Content-Type"), "application/problem+json") && json.Unmarshal(body, &p) == nil && p.Title != "" {
		return &problemError{Status: hr.StatusCode, Problem: p}
	}
	if hr.StatusCode == http.StatusBadRequest && hr.Request.URL.Scheme == "http" && bytes.Contains(body, []byte("HTTP request to an HTTPS server")) {
		// Go's TLS server answers plain HTTP with its own words; say
		// which URL to use instead.
		u := *hr.Request.URL
		u.Scheme, u.Path, u.RawQuery = "https", "", ""
		return fmt.Errorf("the controller at %s://%s serves TLS: use %s (with --ca-pin sha256:… if it serves under the mesh's own CA: "+
			"its start message and every join token's answer give the pin)", hr.Request.URL.Scheme, hr.Request.URL.Host, u.String())
	}
	return fmt.Errorf("unexpected answer %s from %s %s: %.200s", hr.Status, hr.Request.Method, hr.Request.URL.Path, body)
}

// notTheAPI is an answer that did not come from the controller's API: a
// watch ends on it rather than asking again.
type notTheAPI struct{ words string }

func (e *notTheAPI) Error() string { return e.words }

// keepRedirect does not follow a redirect: the controller's API never
// answers one, and following it turned a POST into a GET of whatever page
// it named (a proxy's login page), answered 200. expect says what came.
func keepRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// isJSON says whether a Content-Type is JSON's (problem+json included).
func isJSON(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	mt = strings.TrimSpace(strings.ToLower(mt))
	return mt == "application/json" || strings.HasSuffix(mt, "+json")
}

func orWord(s, word string) string {
	if s == "" {
		return word
	}
	return s
}

// printJSON writes an API answer as it came, indented.
func (a *app) printJSON(body []byte) error {
	var buf bytes.Buffer
	if err := json.Indent(&buf, body, "", "  "); err != nil {
		return fmt.Errorf("the controller's answer is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	_, err := a.out.Write(buf.Bytes())
	return err
}

// encodeJSON writes v as indented JSON (for answers meshctl assembles, as
// the pages of a list).
func (a *app) encodeJSON(v any) error {
	enc := json.NewEncoder(a.out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows aligned in columns; the first row is the header.
func (a *app) table(rows [][]string) error {
	tw := tabwriter.NewWriter(a.out, 0, 4, 2, ' ', 0)
	for _, r := range rows {
		cells := make([]string, len(r))
		for i, c := range r {
			cells[i] = shown(c)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	return tw.Flush()
}

// shown is a cell as a terminal may print it: what a host reported (a
// reason, its version, a check's detail) reaches the operator's terminal
// here, and escape sequences in it could rewrite the screen, set the
// clipboard or hide text, so control characters (tabs and newlines too,
// which would break the table) are written as Go escapes, and so are the
// format characters (Unicode's Cf: a check's detail "status \u202e002 ,ko"
// read "status ok, 200" on the operator's terminal, a zero-width space made
// a check's name look like another's), as the dashboard escapes them.
func shown(s string) string {
	if !strings.ContainsFunc(s, hiddenRune) && utf8.ValidString(s) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func hiddenRune(r rune) bool { return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) }

// ago says how long ago t was, for tables; "-" when never.
func ago(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "-"
	}
	if now := time.Now(); now.Sub(*t) < 48*time.Hour {
		return models.Ago(*t, now) // as the dashboard and the API's state words say it
	}
	return t.Local().Format("2006-01-02")
}

// page is one page of any list: its items kept as the API sent them.
type page struct {
	Items      []json.RawMessage `json:"items"`
	NextCursor string            `json:"next_cursor"`
}

// list prints what collect read: the pages as read with -o json, else a
// table of header and a row per item.
func list[T any](a *app, items []T, raw page, header []string, row func(T) []string) error {
	if a.jsonOut() {
		return a.encodeJSON(raw)
	}
	rows := [][]string{header}
	for _, it := range items {
		rows = append(rows, row(it))
	}
	return a.table(rows)
}

// collect follows a list's cursor until max items (0: all) and returns
// them decoded and as they came. fetch asks for a page of n: no more than
// what is left to max, so the last page ends at max and its next_cursor
// is the one after the last item printed (a script pages on from it).
func collect[T any](max int, fetch func(cursor *string, n int) (*http.Response, []byte, error)) ([]T, page, error) {
	// An empty list prints as the API sends it, "items": [], never null.
	all := page{Items: []json.RawMessage{}}
	var items []T
	var cursor *string
	for {
		n := 500
		if max > 0 {
			n = min(max-len(items), 500)
		}
		hr, body, err := fetch(cursor, n)
		if err != nil {
			return nil, all, reach(err)
		}
		if err := expect(hr, body, http.StatusOK); err != nil {
			return nil, all, err
		}
		var p page
		if err := json.Unmarshal(body, &p); err != nil {
			return nil, all, reach(err)
		}
		for _, raw := range p.Items {
			var v T
			if err := json.Unmarshal(raw, &v); err != nil {
				return nil, all, reach(err)
			}
			items = append(items, v)
			all.Items = append(all.Items, raw)
			if max > 0 && len(items) == max {
				all.NextCursor = p.NextCursor
				return items, all, nil
			}
		}
		if p.NextCursor == "" {
			return items, all, nil
		}
		cursor = &p.NextCursor
	}
}

// isTerminal says whether f is a terminal (a character device), where
// progress bars are drawn; elsewhere watch prints a line per change.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// localTime is how a time is printed: the local zone, named (the dashboard
// and the API say UTC; a time without its zone reads as either).
const localTime = "2006-01-02 15:04:05 MST"

package agent

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"mesh/meshca"
	"mesh/models"
	"mesh/version"
)

// MaxDeclaration caps a poll's body: a declaration larger than this is
// refused (the controller composes none so large: models.MaxPayload).
const MaxDeclaration = models.MaxDeclaration

// errSwitch means: this controller cannot serve us now (connection failed,
// a 5xx — 503 draining, a proxy's 502 —, an answer cut off); try the next
// URL.
var errSwitch = errors.New("try the next controller")

// client speaks the host protocol to the controllers, one at a time.
type client struct {
	id    *Identity
	route *route
	http  *http.Client
	cur   int // index of the controller in use
}

// route is the controller URLs and the transport to them, shared by the
// agent's clients and replaced at once when the host moves to TLS.
type route struct {
	urls atomic.Pointer[[]string]
	rt   atomic.Pointer[http.Transport]
}

func (r *route) RoundTrip(req *http.Request) (*http.Response, error) {
	return r.rt.Load().RoundTrip(req)
}

// newTransport verifies an https:// controller against the mesh CA and
// nothing else (the system's roots are not consulted), presents the
// machine certificate, and speaks HTTP/1.1 only.
func newTransport(ca *x509.Certificate, certs *certKeeper) *http.Transport {
	t := &http.Transport{
		Proxy: http.ProxyFromEnvironment, MaxIdleConnsPerHost: 2, IdleConnTimeout: 90 * time.Second,
		ResponseHeaderTimeout: 0, // the long poll decides
	}
	if ca != nil {
		t.TLSClientConfig = meshca.ClientConfig(ca)
		if certs != nil {
			t.TLSClientConfig.GetClientCertificate = certs.present
		}
	}
	return t
}

// newClient speaks to id's controllers.
func newClient(id *Identity) *client {
	r := &route{}
	urls := append([]string(nil), id.Controllers...)
	r.urls.Store(&urls)
	r.rt.Store(newTransport(id.ca, id.certs))
	return &client{id: id, route: r, http: &http.Client{Transport: r}}
}

// sibling is another client on the same route (the check loop's).
func (c *client) sibling() *client { return &client{id: c.id, route: c.route, http: c.http} }

func (c *client) urls() []string { return *c.route.urls.Load() }

func (c *client) base() string { u := c.urls(); return u[c.cur%len(u)] }

// next moves to the next controller URL.
func (c *client) next() { c.cur = (c.cur + 1) % len(c.urls()) }

// pollResult is one poll's answer.
type pollResult struct {
	// tlsHint is X-Mesh-TLS: the controller, reached over plain HTTP,
	// serves TLS there.
	tlsHint     string
	notModified bool
	body        []byte
	send        string
	etag        string
}

// poll is one long poll. Its deadline is wait plus a margin: a body that
// trickles past it is cut off.
func (c *client) poll(ctx context.Context, finished int64, finishedSend string, wait time.Duration) (*pollResult, error) {
	// The controller answers by wait + wait/16; past this, the body is cut
	// off and the next controller is tried.
	ctx, cancel := context.WithTimeout(ctx, wait+wait/8+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/api/v1/host/declaration?wait=%s", c.base(), wait), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.id.Token)
	req.Header.Set("If-None-Match", fmt.Sprintf(`"%d"`, finished))
	req.Header.Set("X-Mesh-Host-Version", version.Version)
	req.Header.Set("X-Mesh-Schema", SchemaHeader)
	req.Header.Set(models.HeaderEnvelope, models.EnvelopeBatch)
	if finishedSend != "" {
		req.Header.Set(models.HeaderFinishedSend, finishedSend)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errSwitch, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusNotModified:
		return &pollResult{notModified: true, tlsHint: resp.Header.Get("X-Mesh-TLS")}, nil
	case http.StatusOK:
		if send := resp.Header.Get("X-Mesh-Send"); send != "" && !models.IsSendID(send) {
			// Not signed, and kept as the finished generation's send for
			// every later poll: one that is no send id (a proxy's doing)
			// had every later poll refused 400, for good. Taken as a
			// failed poll: the next one, or the next controller, answers.
			return nil, fmt.Errorf("%w: poll %s: its X-Mesh-Send %q is no send id: the answer is not the controller's as it left it",
				errSwitch, c.base(), models.EscapeLogLine(send, 80))
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, MaxDeclaration+1))
		if err != nil {
			// Cut off or trickled past the deadline: the next controller
			// is tried, as for a connection that failed.
			return nil, fmt.Errorf("%w: reading declaration from %s: %v", errSwitch, c.base(), err)
		}
		if len(b) > MaxDeclaration {
			// A declaration, refused unread (handle reports it): not a
			// failed poll, which would only be made again.
			return &pollResult{body: nil, send: resp.Header.Get("X-Mesh-Send"), etag: resp.Header.Get("ETag")}, nil
		}
		return &pollResult{body: b, send: resp.Header.Get("X-Mesh-Send"), etag: resp.Header.Get("ETag"), tlsHint: resp.Header.Get("X-Mesh-TLS")}, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode >= 500 {
		// Any 5xx, as for a report: a proxy whose controller is down
		// answers 502 or 504, a controller that cannot store a send 500;
		// kept on it, the host never reached the controller that is up.
		return nil, fmt.Errorf("%w: poll %s: %s: %s", errSwitch, c.base(), resp.Status, problemDetail(b))
	}
	return nil, fmt.Errorf("poll %s: %s: %s", c.base(), resp.Status, problemDetail(b))
}

// postReport sends one report; the caller keeps it in the outbox until this
// succeeds.
func (c *client) postReport(ctx context.Context, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "POST", c.base()+"/api/v1/host/reports", bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.id.Token)
	req.Header.Set("Content-Type", "application/json")
	// This host's clock as the report leaves (each attempt its own): the
	// controller reads the times the report carries against it, so a
	// clock behind or ahead does not move when a check began failing.
	req.Header.Set(models.HostTimeHeader, time.Now().UTC().Format(time.RFC3339Nano))
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %v", errSwitch, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	switch {
	case resp.StatusCode == http.StatusCreated:
		return nil
	case resp.StatusCode >= 500:
		return fmt.Errorf("%w: report: %s", errSwitch, resp.Status)
	case resp.StatusCode == http.StatusUnauthorized, resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode == http.StatusTooManyRequests:
		// Not a judgement of the report: a token the controller cannot
		// check now, a slow request, a busy controller. Sent again later.
		return fmt.Errorf("report: %s: %s", resp.Status, problemDetail(b))
	case resp.StatusCode >= 400 && !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/problem+json"):
		// Not the controller's words (it says every refusal as a problem):
		// a proxy's 404 or 403 between. Taken as a refusal, the report was
		// moved to the journal and the controller never heard of it.
		return fmt.Errorf("%w: report: %s, not in the controller's words: %.120q", errSwitch, resp.Status, b)
	case resp.StatusCode >= 400:
		return &reportRefused{status: resp.StatusCode, detail: problemDetail(b)}
	}
	return fmt.Errorf("report: %s", resp.Status)
}

// reportRefused is a 4xx (but 401, 408, 429) for a report: the controller
// judged the report itself, so sending it again will not help.
type reportRefused struct {
	status int
	detail string
}

func (e *reportRefused) Error() string {
	return fmt.Sprintf("report refused (%d): %s", e.status, e.detail)
}

// fetchBlob downloads a blob into the state dir's cache, verifying its
// digest; a cached blob whose bytes still match is reused. A partial
// download is resumed with Range.
func (c *client) fetchBlob(ctx context.Context, stateDir, digest string, size int64) (string, error) {
	if !models.ValidDigest(digest) {
		return "", fmt.Errorf("artifact digest %q is not sha256:<hex>", digest)
	}
	dir := filepath.Join(stateDir, "blobs")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, digest[7:])
	if ok, _ := fileHasDigest(path, digest); ok {
		return path, nil
	}
	part := path + ".part"
	var lastErr error
	// Each controller URL gets its tries: a download that fails on one
	// (draining, down, cut off) goes on from another, as polls and
	// reports do, before the host says it could not fetch the artifact.
	attempts := 3 * max(1, len(c.urls()))
	restarted := false
	for attempt := range attempts {
		if attempt > 0 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(time.Duration(min(attempt, 5)) * time.Second):
			}
		}
		fi, _ := os.Stat(part)
		resumed := fi != nil && fi.Size() > 0
		if err := c.download(ctx, digest, part, size); err != nil {
			lastErr = err
			c.next()
			continue
		}
		ok, err := fileHasDigest(part, digest)
		if err != nil {
			return "", err
		}
		if !ok {
			os.Remove(part)
			if resumed && !restarted {
				// Resumed from a partial file that was not the artifact's
				// (a power loss mid-write): once more, from the start.
				restarted, lastErr = true, fmt.Errorf("the download resumed from a damaged partial file")
				continue
			}
			return "", fmt.Errorf("artifact %s: the bytes served do not match the digest", digest)
		}
		if size > 0 {
			if fi, err := os.Stat(part); err == nil && fi.Size() != size {
				os.Remove(part)
				return "", fmt.Errorf("artifact %s: %d bytes, the declaration says %d", digest, fi.Size(), size)
			}
		}
		return path, os.Rename(part, path)
	}
	return "", fmt.Errorf("artifact %s: %w", digest, lastErr)
}

// download appends the artifact's bytes to part, at most size in all when
// the size is known (size > 0): an answer that goes on past it is not the
// artifact, and was written to the state dir's disk until its 30 minutes
// ran out (the digest judged only after).
func (c *client) download(ctx context.Context, digest, part string, size int64) error {
	f, err := os.OpenFile(part, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	have, _ := f.Seek(0, io.SeekEnd)
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", c.base()+models.BlobURL(digest), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+c.id.Token)
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		if err := f.Truncate(0); err != nil {
			return err
		}
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
	case http.StatusPartialContent:
	case http.StatusRequestedRangeNotSatisfiable:
		// The partial file is as long as the artifact or longer: whole
		// already (cut off before its rename), or not the artifact's.
		// Judged by its digest; started over if it is not.
		return nil
	default:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return fmt.Errorf("GET %s: %s: %s", models.BlobURL(digest), resp.Status, strings.TrimSpace(problemDetail(b)))
	}
	var body io.Reader = resp.Body
	start, _ := f.Seek(0, io.SeekEnd)
	known := size > 0 || digest == models.DigestOf(nil) // an empty artifact's size is known too
	if known {
		body = io.LimitReader(resp.Body, size-start+1)
	}
	n, err := io.Copy(f, body)
	if err != nil {
		return err
	}
	if known && start+n > size {
		_ = f.Truncate(0) // not the artifact: nothing of it is kept
		return fmt.Errorf("GET %s: the answer goes on past the artifact's %d bytes", models.BlobURL(digest), size)
	}
	return f.Sync()
}

// fileHasDigest says whether the file at path has digest (false, no
// error, when there is no file).
func fileHasDigest(path, digest string) (bool, error) {
	got, err := digestOf(path)
	if os.IsNotExist(err) {
		return false, nil
	}
	return err == nil && got == digest, err
}

// outbox keeps reports until the controller has them: nothing is lost to
// an outage. A report that cannot be written to it (a full or read-only
// state dir) is held in memory, after every one on disk, and sent from
// there: the controller still hears of what the host did, though a restart
// before it is sent loses it.
type outbox struct {
	dir      string // state/outbox
	stateDir string // where the journal is
	log      *slog.Logger

	writes *stateWrites // told how each write ended (nil: nobody)

	mu   sync.Mutex
	held [][]byte // reports not written to dir, oldest first
	last uint64   // the number of the last report written (see write)
}

// maxHeld bounds the reports held in memory; past it the oldest is
// dropped (the disk has been full for that long).
const maxHeld = 1000

// put queues r. Held reports go to disk first, so that order is kept; when
// the disk will not take r it is held, and the error says why.
func (o *outbox) put(r models.Report) (string, error) {
	b, err := json.Marshal(r)
	if err != nil {
		return "", err
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	var werr error
	for len(o.held) > 0 {
		if _, werr = o.write(o.held[0]); werr != nil {
			break
		}
		o.held = o.held[1:]
	}
	if len(o.held) == 0 {
		name, err := o.write(b)
		if err == nil {
			return name, nil
		}
		o.hold(b)
		return "", fmt.Errorf("held in memory, to be sent from there: %w", err)
	}
	o.hold(b)
	// The failed write was the oldest held report's; the check's retry
	// must fit the largest one held, b too.
	largest := 0
	for _, h := range o.held {
		largest = max(largest, len(h))
	}
	o.writes.note(filepath.Base(o.dir), o.dir, "", largest, werr)
	return "", fmt.Errorf("held in memory behind %d report(s) the outbox could not take", len(o.held)-1)
}

func (o *outbox) hold(b []byte) {
	if len(o.held) >= maxHeld {
		if o.log != nil {
			o.log.Error("outbox: a report held in memory is dropped, the state dir having taken none of the last ones", "held", len(o.held))
		}
		o.held = o.held[1:]
	}
	o.held = append(o.held, b)
}

// write queues b under the next name. Names are numbers in the order
// written, twenty digits so that they sort: the highest queued (or, when
// none is, the last this process wrote) plus one. The clock has no say: one
// stepped back (NTP after a VM resumed) put a report written later before
// those written earlier, and the controller took the older as the last
// word on its generation. Names of the clock's (an earlier release's
// UnixNano) are read as numbers too, and the sequence goes on past them.
func (o *outbox) write(b []byte) (string, error) {
	name, err := o.writeNext(b)
	o.writes.note(filepath.Base(o.dir), o.dir, "", len(b), err)
	return name, err
}

func (o *outbox) writeNext(b []byte) (string, error) {
	if err := os.MkdirAll(o.dir, 0o700); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(o.dir)
	if err != nil {
		return "", err
	}
	next := o.last + 1
	for _, e := range ents {
		num, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(num, 10, 63); err == nil && n >= next {
			next = n + 1
		}
	}
	name := filepath.Join(o.dir, fmt.Sprintf("%020d.json", next))
	if err := writeFileAtomic(name, b, 0o600); err != nil {
		return "", err
	}
	o.last = next
	return name, nil
}

// flush sends every queued report in order, those on disk and then those
// held in memory; it stops at the first that cannot be sent now (a network
// error, a 5xx, 401, 408, 429), to be sent again later. A report the
// controller refuses (any other 4xx) is moved to the journal with the
// status and the problem's detail, never sent again, and the next report
// goes on: one report the controller will never take must not hold back
// every report after it.
func (o *outbox) flush(ctx context.Context, c *client) error {
	ents, err := os.ReadDir(o.dir)
	if err != nil && !os.IsNotExist(err) && !o.heldAny() {
		return err
	}
	dirErr := err
	for _, e := range ents {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		p := filepath.Join(o.dir, e.Name())
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if err := o.send(ctx, c, b); err != nil {
			return err
		}
		if err := os.Remove(p); err != nil && !os.IsNotExist(err) {
			return err
		}
	}
	for {
		o.mu.Lock()
		if len(o.held) == 0 {
			o.mu.Unlock()
			break
		}
		b := o.held[0]
		o.mu.Unlock()
		if err := o.send(ctx, c, b); err != nil {
			return err
		}
		o.mu.Lock()
		if len(o.held) > 0 && &o.held[0][0] == &b[0] {
			o.held = o.held[1:]
		}
		o.mu.Unlock()
	}
	if dirErr != nil && !os.IsNotExist(dirErr) {
		return dirErr
	}
	return nil
}

func (o *outbox) heldAny() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.held) > 0
}

// send posts one report, to each controller in turn while one cannot take
// it now; a report the controller refuses is journaled and counts as sent.
func (o *outbox) send(ctx context.Context, c *client, b []byte) error {
	err := c.postReport(ctx, b)
	for tries := 1; errors.Is(err, errSwitch) && tries < len(c.urls()) && ctx.Err() == nil; tries++ {
		c.next()
		err = c.postReport(ctx, b)
	}
	var refused *reportRefused
	if errors.As(err, &refused) {
		// Journaled first: a crash before the remove only journals it twice.
		if err := o.journalRefused(b, refused); err != nil {
			return fmt.Errorf("journaling a refused report: %w", err)
		}
		return nil
	}
	return err
}

// journalRefused appends a report the controller refused to the journal,
// as the entry it would have been, with why it was refused.
func (o *outbox) journalRefused(b []byte, refused *reportRefused) error {
	var r models.Report
	if err := json.Unmarshal(b, &r); err != nil {
		// Not a report this host wrote: keep its bytes in the reason.
		r.Reason = string(b)
	}
	if o.log != nil {
		o.log.Warn("the controller refused a report; moved to the journal, not sent again",
			"status", refused.status, "detail", refused.detail, "generation", r.Generation, "send", r.Send, "outcome", r.Outcome)
	}
	at := time.Now().UTC()
	if r.FinishedAt != nil {
		at = *r.FinishedAt
	}
	return appendJournal(o.stateDir, Entry{Time: at, Send: r.Send, Generation: r.Generation, Digest: r.Digest,
		Outcome: r.Outcome, Reason: r.Reason, Attempt: r.Attempt, Actions: r.Actions, Checks: r.Checks,
		ReportRefused: &ReportRefusal{Status: refused.status, Detail: refused.detail}})
}

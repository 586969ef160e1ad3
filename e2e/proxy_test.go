package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
)

// captured is one 200 a controller gave a host's poll.
type captured struct {
	header http.Header
	body   []byte
}

// proxy sits between a host and the controller on loopback: it records
// every declaration the controller sends, and can answer the host's next
// poll with one of them instead — the stale send of the incident.
type proxy struct {
	*httptest.Server
	mu           sync.Mutex
	captured     []captured
	inject       *captured
	corruptBlobs bool
}

func newProxy(t *testing.T, target string) *proxy {
	u, _ := url.Parse(target)
	p := &proxy{}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ModifyResponse = func(r *http.Response) error {
		p.mu.Lock()
		corrupt := p.corruptBlobs
		p.mu.Unlock()
		if corrupt && strings.HasPrefix(r.Request.URL.Path, "/api/v1/blobs/") && r.StatusCode < 300 {
			b, err := io.ReadAll(r.Body)
			if err != nil {
				return err
			}
			if len(b) > 0 {
				b[len(b)/2] ^= 0xff // the bytes no longer match their digest
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
			return nil
		}
		if r.Request.URL.Path != "/api/v1/host/declaration" || r.StatusCode != 200 {
			return nil
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		p.mu.Lock()
		p.captured = append(p.captured, captured{header: r.Header.Clone(), body: b})
		p.mu.Unlock()
		return nil
	}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/host/declaration" {
			p.mu.Lock()
			inj := p.inject
			p.inject = nil
			p.mu.Unlock()
			if inj != nil {
				for k, v := range inj.header {
					if !strings.EqualFold(k, "Content-Length") {
						w.Header()[k] = v
					}
				}
				w.WriteHeader(200)
				_, _ = w.Write(inj.body)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

// last returns the last declaration captured whose ETag is gen.
func (p *proxy) byETag(etag string) *captured {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i := len(p.captured) - 1; i >= 0; i-- {
		if p.captured[i].header.Get("ETag") == etag {
			c := p.captured[i]
			return &c
		}
	}
	return nil
}

// replay answers the host's next poll with c.
func (p *proxy) replay(c captured) {
	p.mu.Lock()
	p.inject = &c
	p.mu.Unlock()
}

func (p *proxy) injected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.inject == nil
}

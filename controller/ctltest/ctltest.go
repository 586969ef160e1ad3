// Package ctltest starts real controllers for tests, on loopback with a real
// store, and talks to them over real HTTP. Every response a test receives is
// validated against openapi.yaml, so the spec cannot drift from the code.
//
// Its controllers hash passwords at bcrypt's least cost (auth.PasswordCost):
// what a test checks of a password is the same at any cost, and the default
// cost made most of a test controller's start under the race detector.
package ctltest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"mime/multipart"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"golang.org/x/crypto/bcrypt"

	"mesh"
	"mesh/auth"
	"mesh/controller"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// Env is a running controller and a client for it.
type Env struct {
	T     testing.TB
	Ctl   *controller.Controller
	URL   string
	Admin string // an admin's bearer token
	HTTP  *http.Client

	stopOnce sync.Once
	uploads  atomic.Int64 // Upload's count, its commit: each upload a build of its own
}

func init() { auth.PasswordCost = bcrypt.MinCost }

var (
	specOnce   sync.Once
	specDoc    *openapi3.T
	specRouter routers.Router
	specErr    error
)

// Spec is openapi.yaml, loaded and validated once.
func Spec(tb testing.TB) (*openapi3.T, routers.Router) {
	tb.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		specDoc, specErr = loader.LoadFromData(mesh.OpenAPI)
		if specErr == nil {
			specErr = specDoc.Validate(loader.Context)
		}
		if specErr == nil {
			specDoc.Servers = nil // match any host
			specRouter, specErr = gorillamux.NewRouter(specDoc)
		}
	})
	if specErr != nil {
		tb.Fatalf("openapi.yaml: %v", specErr)
	}
	return specDoc, specRouter
}

// ValidateResponse checks a response against the spec: its route, status,
// headers and body (with additionalProperties: false, an undocumented field fails).
func ValidateResponse(tb testing.TB, req *http.Request, status int, header http.Header, body []byte) error {
	_, router := Spec(tb)
	r := req.Clone(context.Background())
	r.URL.Host, r.URL.Scheme = "", ""
	route, params, err := router.FindRoute(r)
	if err != nil {
		return fmt.Errorf("%s %s is not in openapi.yaml: %w", req.Method, req.URL.Path, err)
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{Request: r, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc}},
		Status: status, Header: header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// validating checks every response against the spec.
type validating struct {
	tb   testing.TB
	next http.RoundTripper
}

func (v validating) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := v.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/octet-stream") {
		return resp, nil // blob bytes: nothing to validate
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := ValidateResponse(v.tb, req, resp.StatusCode, resp.Header, body); err != nil {
		v.tb.Errorf("response of %s %s (%d) does not match openapi.yaml: %v\nbody: %.500s", req.Method, req.URL.Path, resp.StatusCode, err, body)
	}
	return resp, nil
}

// Options change how a test controller starts.
type Options struct {
	FlushEvery     time.Duration
	HeartbeatEvery time.Duration
	RolloutEvery   time.Duration
	ResyncEvery    time.Duration
	StoreTimeout   time.Duration
	// TLS serves TLS under the mesh CA; the Env's client trusts it.
	// MachineCertLifetime and MachineCertGrace are the controller's.
	TLS                                   bool
	MachineCertLifetime, MachineCertGrace time.Duration
	// Advertise is the controller's --advertise.
	Advertise []string
	// StoreOpened is the controller's (controller.Config.StoreOpened):
	// where a test registers gorm callbacks, before any worker queries.
	StoreOpened func(*store.Store)
}

// Start runs a controller on a fresh store of the dialect.
func Start(tb testing.TB, dialect string, opts ...Options) *Env {
	tb.Helper()
	return StartWith(tb, storetest.Migrated(tb, dialect), opts...)
}

// StartWith runs a controller on the store cfg names.
func StartWith(tb testing.TB, sc store.Config, opts ...Options) *Env {
	tb.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	var out bytes.Buffer
	level := slog.LevelWarn
	if os.Getenv("MESH_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	cfg := controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL, Out: &out,
		FlushEvery: o.FlushEvery, HeartbeatEvery: o.HeartbeatEvery, RolloutEvery: o.RolloutEvery, ResyncEvery: o.ResyncEvery, StoreTimeout: o.StoreTimeout, DrainTimeout: 5 * time.Second,
		Log: slog.New(slog.NewTextHandler(testWriter{tb}, &slog.HandlerOptions{Level: level})),
		TLS: o.TLS, MachineCertLifetime: o.MachineCertLifetime, MachineCertGrace: o.MachineCertGrace, Advertise: o.Advertise,
		StoreOpened: o.StoreOpened}
	c, err := controller.Start(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	var rt http.RoundTripper = http.DefaultTransport
	if o.TLS {
		rt = &http.Transport{TLSClientConfig: meshca.ClientConfig(c.CA.Cert)}
	}
	e := &Env{T: tb, Ctl: c, URL: c.URL(), HTTP: &http.Client{Transport: validating{tb, rt}, Timeout: 5 * time.Minute}}
	tb.Cleanup(e.Stop)
	if m := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(out.String()); m != nil {
		e.Admin = e.Login("admin", m[1])
	}
	return e
}

// Stop stops the controller (once).
func (e *Env) Stop() {
	if e.Ctl == nil {
		return
	}
	e.stopOnce.Do(func() {
		if err := e.Ctl.Stop(); err != nil {
			e.T.Logf("stopping controller: %v", err)
		}
	})
}

type testWriter struct{ tb testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Request is one API call.
type Request struct {
	Method string
	Path   string
	Token  string
	Body   any // marshalled as JSON unless []byte or io.Reader
	Header map[string]string
}

// Do sends a request and returns the response with its body read.
func (e *Env) Do(r Request) (*http.Response, []byte) {
	e.T.Helper()
	var body io.Reader
	switch b := r.Body.(type) {
	case nil:
	case []byte:
		body = bytes.NewReader(b)
	case io.Reader:
		body = b
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.T.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequest(r.Method, e.URL+r.Path, body)
	if err != nil {
		e.T.Fatal(err)
	}
	if r.Body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if r.Token != "" {
		req.Header.Set("Authorization", "Bearer "+r.Token)
	}
	for k, v := range r.Header {
		req.Header.Set(k, v)
	}
	resp, err := e.HTTP.Do(req)
	if err != nil {
		e.T.Fatalf("%s %s: %v", r.Method, r.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		e.T.Fatal(err)
	}
	return resp, b
}

// JSON sends a request, expects status, and decodes the body into out (if not nil).
func (e *Env) JSON(r Request, status int, out any) *http.Response {
	e.T.Helper()
	resp, b := e.Do(r)
	if resp.StatusCode != status {
		e.T.Fatalf("%s %s: status %d, want %d: %s", r.Method, r.Path, resp.StatusCode, status, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			e.T.Fatalf("%s %s: decoding %s: %v", r.Method, r.Path, b, err)
		}
	}
	return resp
}

// Login returns a person's token.
func (e *Env) Login(user, password string) string {
	e.T.Helper()
	var tok struct{ Token string }
	e.JSON(Request{Method: "POST", Path: "/api/v1/auth/login", Body: map[string]string{"username": user, "password": password}}, 200, &tok)
	return tok.Token
}

// AddUser makes a user with a role and returns their token.
func (e *Env) AddUser(name, role string) string {
	e.T.Helper()
	pw := "password-of-" + name
	e.JSON(Request{Method: "POST", Path: "/api/v1/users", Token: e.Admin, Body: map[string]string{"name": name, "role": role, "password": pw}}, 201, nil)
	return e.Login(name, pw)
}

// JoinToken makes a join token.
func (e *Env) JoinToken() string {
	e.T.Helper()
	var tok struct{ Token string }
	e.JSON(Request{Method: "POST", Path: "/api/v1/join-tokens", Token: e.Admin}, 201, &tok)
	return tok.Token
}

// Enrolled is what enrolment gave a host.
type Enrolled struct {
	Machine string `json:"machine"`
	Token   string `json:"token"`
	Keys    []struct {
		KeyID     string `json:"key_id"`
		PublicKey []byte `json:"public_key"`
	} `json:"keys"`
}

// Enroll enrols a machine with a fresh join token.
func (e *Env) Enroll(name string) Enrolled {
	e.T.Helper()
	var out Enrolled
	e.JSON(Request{Method: "POST", Path: "/api/v1/enroll", Body: map[string]string{
		"join_token": e.JoinToken(), "name": name, "os": "linux", "arch": "amd64", "host_version": "1.0.0", "schema": "1"}}, 201, &out)
	return out
}

// Upload posts a build as multipart: manifest, version, commit, and the
// artifact and digest when given. It returns the response.
func (e *Env) Upload(token, module, manifest string, artifact []byte, digest string) (*http.Response, []byte) {
	e.T.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("manifest", manifest)
	_ = mw.WriteField("version", "1.0.0")
	// Each upload names a commit of its own: an upload the module's newest
	// build already holds is a retry, and makes no build.
	_ = mw.WriteField("commit", fmt.Sprintf("abc%d", 123+e.uploads.Add(1)-1))
	if digest != "" {
		_ = mw.WriteField("digest", digest)
	}
	if artifact != nil {
		w, _ := mw.CreateFormFile("artifact", "artifact.tar.gz")
		_, _ = w.Write(artifact)
	}
	mw.Close()
	return e.Do(Request{Method: "POST", Path: "/api/v1/modules/" + module + "/builds", Token: token, Body: buf.Bytes(),
		Header: map[string]string{"Content-Type": mw.FormDataContentType()}})
}

// Attach is a client for a controller running elsewhere (a real binary).
func Attach(tb testing.TB, url, admin string) *Env {
	return AttachWith(tb, url, admin, http.DefaultTransport)
}

// AttachWith is Attach through a transport of the test's (one that trusts
// the mesh CA, for a controller serving TLS).
func AttachWith(tb testing.TB, url, admin string, rt http.RoundTripper) *Env {
	return &Env{T: tb, URL: url, Admin: admin,
		HTTP: &http.Client{Transport: validating{tb, rt}, Timeout: 5 * time.Minute}}
}

// UploadRelease posts a host release for this machine's platform that
// decodes the schemas today's host does (1,2).
func (e *Env) UploadRelease(token, version string, binary []byte) (*http.Response, []byte) {
	e.T.Helper()
	return e.UploadReleaseSchemas(token, version, "1,2", binary)
}

// UploadReleaseSchemas is UploadRelease of a binary that decodes schemas
// ("" sends no schemas field).
func (e *Env) UploadReleaseSchemas(token, version, schemas string, binary []byte) (*http.Response, []byte) {
	e.T.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("version", version)
	_ = mw.WriteField("os", runtime.GOOS)
	_ = mw.WriteField("arch", runtime.GOARCH)
	if schemas != "" {
		_ = mw.WriteField("schemas", schemas)
	}
	w, _ := mw.CreateFormFile("binary", "mesh-host")
	_, _ = w.Write(binary)
	mw.Close()
	return e.Do(Request{Method: "POST", Path: "/api/v1/host-releases", Token: token, Body: buf.Bytes(),
		Header: map[string]string{"Content-Type": mw.FormDataContentType()}})
}

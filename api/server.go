// Package api is the controller's HTTP/JSON API: the host protocol (enroll,
// long poll, reports, blobs) and the operator API, with auth, body limits
// and the one error mapper. It never imports web/.
package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"

	"github.com/labstack/echo/v4"
	"github.com/labstack/echo/v4/middleware"
	"golang.org/x/time/rate"

	"mesh/auth"
	"mesh/conns"
	"mesh/hub"
	"mesh/meshca"
	"mesh/models"
	"mesh/service"
)

// DefaultStoreTimeout bounds a request's wait on the store.
const DefaultStoreTimeout = 30 * time.Second

// Body limits: every route has one. Uploads are artifacts (Server.MaxUpload);
// the rest JSON.
const (
	MaxJSONBody      = 1 << 20   // 1 MiB
	MaxAnonymousBody = 64 << 10  // 64 KiB: a login's or an enrolment's (a name, a secret, a CSR)
	DefaultMaxUpload = 512 << 20 // 512 MiB
)

// ReportKiBBurst and ReportKiBPerSecond bound the bytes of one machine's
// reports: 4 MiB at once, then 16 KiB a second.
const (
	ReportKiBBurst     = 4 << 10
	ReportKiBPerSecond = 16
)

// Server holds the API's dependencies, filled in by cmd/.
type Server struct {
	Store    Store
	Service  *service.Service
	Hub      *hub.Hub
	Sends    *SendWriter
	Auth     *auth.Authority
	Signer   models.Signer
	Instance string
	Log      *slog.Logger
	// StoreTimeout bounds a request's wait on the store: a store that hangs
	// (a lock held, packets dropped) makes requests fail fast with 503.
	// Uploads get UploadTimeout; a long poll waits on the hub, and what it
	// asks the store carries the same bound.
	StoreTimeout time.Duration
	// Rules say machine states (the controller's thresholds).
	Rules models.StateRules
	// Now is the clock (the store's, so tests that fix one fix both).
	Now func() time.Time
	// OpenAPI is the spec served at /openapi.yaml.
	OpenAPI []byte
	// ManifestSchema is the build manifest's JSON Schema, served at
	// /schemas/manifest.json.
	ManifestSchema []byte
	// HostUnit is the host's systemd unit (dist/systemd/mesh-host.service),
	// which /install.sh installs.
	HostUnit []byte
	// Enrolment is what a join token is given with: the CA pin and the URL.
	Enrolment Enrolment
	// ServiceCA signs services' certificates (schema 2's certificate
	// resource); nil on a controller without the mesh CA.
	ServiceCA *meshca.CA

	drainOnce sync.Once
	drainCh   chan struct{}

	parkedCh chan *parkedPoll
	watch    *peerWatch    // nil: no watcher (parked polls are still checked when woken)
	closeCh  chan net.Conn // answered parked connections, closed after the answers
	// Kept serves the connections of answered parked polls again (nil:
	// they are closed). The HTTP server Serves it beside its listener.
	Kept   *conns.Kept
	runCtx context.Context
	// Conns is the listener's cap on connections (nil: none), for
	// /metrics.
	Conns *conns.Listener

	// enrolLimit and hookLimit bound what one address may do unauthenticated.
	enrolLimit *addressLimiter
	// installLimit paces the install script and binary asked for by one
	// address (anyone may); installBlobs holds the binaries they download.
	installLimit  *addressLimiter
	installBlobs  installBlobs
	installOthers installOthers
	// installFacts keeps what the install script is made of a moment.
	installFacts installFacts
	hookLimit    *addressLimiter
	// hookBodies bounds the webhooks' bodies held at once.
	hookBodies *bodyBudget
	// hookSeen knows a signed body delivered before under another id.
	hookSeen seenBodies
	// reportLimit bounds how fast one machine's host may report: a report
	// is a stored row (up to 1 MiB, kept for --keep-sends) that pages of
	// the dashboard read back, and a host's reports are few (each apply,
	// each change of its checks). A refused one stays in the host's
	// outbox and is sent again.
	reportLimit *addressLimiter
	// reportBytes bounds the bytes of them, in KiB: a big apply's report
	// at once, never a host's megabyte a second for as long as reports
	// are kept.
	reportBytes *addressLimiter
	// hostInfoLimit bounds how often one machine's host may change the
	// host version or schemas its polls carry: each change is a write,
	// and a change of schemas a new generation, a declaration and an
	// audit row. A host changes them when it upgrades or rolls back, a
	// few times a rollout; a poll past the limit is refused, nothing of it
	// recorded, and the host polls again.
	hostInfoLimit *addressLimiter
	// certLimiter bounds a machine's client certificates (certLimit);
	// serviceCertLimit its requests for service certificates, before
	// anything of them is read (each resource's certificates are paced by
	// the service, by their lifetime).
	certLimitOnce    sync.Once
	certLimiter      *addressLimiter
	serviceCertLimit *addressLimiter
	// resendLimit bounds how often one generation is sent to its machine
	// at a poll's own asking (not a parked poll's wake-up): ten, then one
	// every 30 s. A poll without If-None-Match was a send row each, ~240
	// a second from one host credential.
	resendLimit *addressLimiter
	// MaxUpload caps an upload's body (a build's artifact, a host
	// release); 0 is DefaultMaxUpload. An upload is streamed into the
	// store, so this bounds the store's growth, not memory.
	MaxUpload int64

	// MetricsMaxAge is how long one read of the fleet from the store
	// serves /metrics; 0 is DefaultMetricsMaxAge.
	MetricsMaxAge time.Duration

	// Plain is the plain-HTTP service to hosts moving to TLS; TLS says
	// the listener serves TLS.
	Plain PlainHosts
	TLS   bool

	// refusals keeps the audit of refused host credentials sparse.
	refusals auth.Refusals

	// Behind says so when the store's schema is newer than this build
	// knows: it serves what it can and says why it cannot serve the rest.
	Behind *models.Behind
}

// NewServer wires a server.
func NewServer(st Store, hub *hub.Hub, sends *SendWriter, auth *auth.Authority, signer models.Signer, instance string, log *slog.Logger, spec []byte) *Server {
	s := &Server{Store: st, Hub: hub, Sends: sends, Auth: auth, Signer: signer, Instance: instance, Log: log,
		OpenAPI: spec, Now: func() time.Time { return time.Now().UTC() }, StoreTimeout: DefaultStoreTimeout, Rules: models.DefaultStateRules,
		enrolLimit:       newAddressLimiter("enrolments", rate.Every(50*time.Millisecond), 500),
		installLimit:     newAddressLimiter("install requests", rate.Every(50*time.Millisecond), 500),
		hookLimit:        newAddressLimiter("webhooks with a bad signature", rate.Every(2*time.Second), 20),
		hookBodies:       newBodyBudget("webhooks' bodies", HookBodies, HookBodiesPerAddress, HookBodyWait),
		reportLimit:      newAddressLimiter("reports", rate.Every(time.Second), 60),
		reportBytes:      newAddressLimiter("KiB of reports", ReportKiBPerSecond, ReportKiBBurst),
		hostInfoLimit:    newAddressLimiter("changes of host version or schemas", rate.Every(time.Minute), 10),
		serviceCertLimit: newAddressLimiter("service certificate requests", rate.Every(time.Second), 100),
		resendLimit:      newAddressLimiter("sends of one generation", rate.Every(30*time.Second), 10), drainCh: make(chan struct{}), parkedCh: make(chan *parkedPoll, 4096), runCtx: context.Background()}
	hub.Dispatch = s.dispatch
	hub.Claim, hub.Answer = s.claim, s.answerClaims
	return s
}

// SetReportLimit sets how fast one machine's host may report: burst at
// once, then one every every (60 and 1 s by default).
func (s *Server) SetReportLimit(every time.Duration, burst int) {
	s.reportLimit = newAddressLimiter("reports", rate.Every(every), burst)
}

// SetReportBytes sets how many KiB of reports one machine's host may send:
// burst at once, then perSecond a second (ReportKiBBurst and
// ReportKiBPerSecond by default).
func (s *Server) SetReportBytes(perSecond float64, burst int) {
	s.reportBytes = newAddressLimiter("KiB of reports", rate.Limit(perSecond), burst)
}

// Start runs the workers that answer parked polls, until ctx ends.
func (s *Server) Start(ctx context.Context) {
	s.runCtx = ctx
	s.closeCh = make(chan net.Conn, 16384)
	go func() {
		for c := range s.closeCh {
			_ = c.Close()
		}
	}()
	for range parkWorkers {
		go s.parkedWorker()
	}
	if w, err := newPeerWatch(s.peerGone, s.Kept); err != nil {
		s.Log.Warn("no watcher of parked connections: a host that leaves is noticed only at its next wake", "err", err)
	} else {
		s.watch = w
		if w.own() {
			go w.run(ctx)
		}
	}
}

// Drain stops composing: held polls are answered 503 with Retry-After: 0 so
// hosts move to their next controller URL.
func (s *Server) Drain() {
	s.drainOnce.Do(func() {
		s.Hub.Stop()
		close(s.drainCh)
		s.dispatch(s.Hub.AllParked())
	})
}

// Draining reports whether Drain was called.
func (s *Server) Draining() bool {
	select {
	case <-s.drainCh:
		return true
	default:
		return false
	}
}

// Register adds every route to e.
func (s *Server) Register(e *echo.Echo) {
	e.HTTPErrorHandler = s.errorHandler
	e.Use(writeProgress)
	e.Use(middleware.RequestID())
	e.Use(s.bodyLimit)
	e.Use(s.accessLog)
	e.Use(s.plainHTTP)
	// Not as the group's middleware: echo then answers every path under
	// the group it has no route for with its own bare 404, where a path
	// or a method it lacks is said in words.
	e.Use(textParams)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/openapi.yaml", s.openapi)
	e.GET("/schemas/manifest.json", s.manifestSchema)
	e.GET("/install.sh", s.installScript, s.installLimited)
	e.GET("/install/mesh-host/:digest", s.installBinary, s.installLimited)
	e.GET("/metrics", s.metrics())

	v1 := e.Group("/api/v1")
	v1.POST("/auth/login", s.login)
	v1.POST("/enroll", s.enroll, s.enrolLimited)

	v1.GET("/host/declaration", s.pollDeclaration, s.requireHost)
	v1.POST("/host/reports", s.postReport, s.requireHost)
	v1.POST("/host/service-certificates", s.postServiceCertificate, s.requireHost)
	v1.POST("/host/certificate", s.renewCertificate)
	v1.GET("/host/ca", s.getCA, s.requireHost)
	v1.GET("/blobs/:digest", s.getBlob, s.requireHostOrViewer)

	viewer := s.requireRole(models.RoleViewer)
	operator := s.requireRole(models.RoleOperator)
	admin := s.requireRole(models.RoleAdmin)

	v1.POST("/join-tokens", s.createJoinToken, admin)
	v1.GET("/join-tokens", s.listJoinTokens, admin)
	v1.POST("/join-tokens/:id/revoke", s.revokeJoinToken, admin)
	v1.POST("/users", s.createUser, admin)
	v1.GET("/users", s.listUsers, admin)

	v1.GET("/machines", s.listMachines, viewer)
	v1.GET("/machines/:name", s.getMachine, viewer)
	v1.DELETE("/machines/:name", s.deleteMachine, admin)
	v1.GET("/machines/:name/assignments", s.getAssignments, viewer)
	v1.PUT("/machines/:name/assignments", s.putAssignments, operator)
	v1.GET("/machines/:name/variables", s.getVariables, viewer)
	v1.PUT("/machines/:name/variables", s.putVariables, operator)
	v1.POST("/machines/:name/push", s.push, operator)
	v1.POST("/machines/:name/resolve", s.resolve, admin)
	v1.POST("/machines/:name/revoke", s.revokeMachine, admin)
	v1.GET("/machines/:name/declaration", s.previewDeclaration, viewer)
	v1.GET("/machines/:name/sends", s.machineSends, viewer)
	v1.GET("/machines/:name/reports", s.machineReports, viewer)
	v1.GET("/machines/:name/logs", s.machineLogs, viewer)
	v1.GET("/sends", s.listSends, viewer)

	v1.GET("/modules", s.listModules, viewer)
	v1.POST("/modules", s.createModule, operator)
	v1.GET("/modules/:module", s.getModule, viewer)
	v1.GET("/modules/:module/builds", s.listBuilds, viewer)
	v1.POST("/modules/:module/builds", s.createBuild, operator)
	v1.GET("/modules/:module/builds/:number", s.getBuild, viewer)
	v1.POST("/modules/:module/builds/:number/yank", s.yankBuild, operator)
	v1.POST("/modules/:module/current", s.setCurrent, operator)

	v1.POST("/host-releases", s.createRelease, admin, s.installChanged)
	v1.GET("/host-releases", s.listReleases, viewer)
	v1.POST("/host-releases/:version/rollout", s.startRollout, admin)
	v1.GET("/host-releases/:version/rollout", s.getRollout, viewer)
	v1.POST("/host-releases/:version/rollout/pause", s.rolloutAction("pause"), admin)
	v1.POST("/host-releases/:version/rollout/resume", s.rolloutAction("resume"), admin)
	v1.POST("/host-releases/:version/rollout/cancel", s.rolloutAction("cancel"), admin, s.installChanged)

	v1.POST("/sources", s.createSource, admin)
	v1.GET("/sources", s.listSources, viewer)
	v1.PATCH("/sources/:source", s.updateSource, admin)
	v1.DELETE("/sources/:source", s.deleteSource, admin)
	v1.POST("/hooks/:source", s.hook)
	v1.POST("/builds/claim", s.claimBuild, s.requireBuilder)
	v1.PUT("/builds/:id/artifact", s.finishBuild, s.requireBuilder)

	v1.POST("/plans", s.createPlan, operator)
	v1.GET("/plans", s.listPlans, viewer)
	v1.GET("/plans/:id", s.getPlan, viewer)
	v1.POST("/plans/:id/pause", s.planAction("pause"), operator)
	v1.POST("/plans/:id/resume", s.planAction("resume"), operator)
	v1.POST("/plans/:id/cancel", s.planAction("cancel"), operator)
	v1.POST("/plans/:id/rollback", s.planAction("rollback"), operator)

	v1.GET("/instances", s.listInstances, viewer)
	v1.GET("/audit", s.listAudit, viewer)
	s.registerPeople(v1)
	s.registerModuleEdits(v1)
	s.registerLabels(v1)
}

// bodyLimit caps every request body; uploads get a larger cap.
func (s *Server) bodyLimit(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		limit, upload, deadline := int64(MaxJSONBody), false, jsonBodyDeadline
		switch {
		case (strings.HasSuffix(c.Path(), "/builds") || c.Path() == "/api/v1/host-releases") && c.Request().Method == http.MethodPost,
			c.Path() == "/api/v1/builds/:id/artifact":
			limit, upload, deadline = s.MaxUpload, true, uploadBodyDeadline
			if limit <= 0 {
				limit = DefaultMaxUpload
			}
		case c.Path() == "/api/v1/hooks/:source":
			// A forge gives a delivery 10 s in all (GitHub; Gitea 5 s): a
			// body still arriving after that is no forge's, and holds the
			// webhooks' bodies' bound meanwhile.
			limit, deadline = MaxHookBody, HookBodyDeadline
		case c.Path() == "/api/v1/auth/login" || c.Path() == "/api/v1/enroll" || c.Path() == "/login":
			// Read before any credential is checked: an outsider's slow
			// bodies held the controller's memory a MiB a connection.
			limit = MaxAnonymousBody
		}
		bodyDeadline(c, deadline)
		r := c.Request()
		// A long poll waits on its own deadline; a blob's download takes
		// as long as its bytes do, each write bounded (progressWriter).
		if c.Path() != "/api/v1/host/declaration" && c.Path() != "/api/v1/blobs/:digest" && c.Path() != "/install/mesh-host/:digest" {
			d := s.StoreTimeout
			if upload {
				d = uploadBodyDeadline
			}
			ctx, cancel := context.WithTimeout(r.Context(), d)
			defer cancel()
			r = r.WithContext(ctx)
			c.SetRequest(r)
		}
		if r.ContentLength > limit {
			return &http.MaxBytesError{Limit: limit}
		}
		r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
		return next(c)
	}
}

func (s *Server) accessLog(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		err := next(c)
		if c.Path() == "/api/v1/host/declaration" && err == nil {
			return nil // a poll a minute per host would drown the log
		}
		status := c.Response().Status
		if err != nil {
			status = problemOf(err).Status
		}
		s.Log.Debug("request", "method", c.Request().Method, "path", c.Request().URL.Path, "status", status,
			"duration", time.Since(start), "request_id", c.Response().Header().Get(echo.HeaderXRequestID))
		return err
	}
}

func (s *Server) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, map[string]string{"status": "ok"})
}

// readyz says whether this instance answers polls: the hub is loaded and
// it is not draining; and whether the store's schema is ahead of it.
func (s *Server) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), min(s.StoreTimeout, 5*time.Second))
	defer cancel()
	st, known, err := s.Store.SchemaVersion(ctx)
	body := map[string]any{"instance": s.Instance, "store_schema": st, "known_schema": known}
	status := http.StatusOK
	switch {
	case err != nil:
		body["status"], body["detail"] = "store unreachable", "store unreachable: "+storeWhy(err)
		status = http.StatusServiceUnavailable
		s.Log.Warn("readyz: store", "err", err)
	case s.Draining():
		body["status"] = "draining"
		status = http.StatusServiceUnavailable
	case !s.Hub.Ready():
		body["status"] = "starting"
		status = http.StatusServiceUnavailable
	case st > known:
		body["status"] = "behind the store"
	default:
		body["status"] = "ready"
	}
	return c.JSON(status, body)
}

func (s *Server) openapi(c echo.Context) error {
	return c.Blob(http.StatusOK, "application/yaml", s.OpenAPI)
}

func (s *Server) manifestSchema(c echo.Context) error {
	if s.ManifestSchema == nil {
		return echo.ErrNotFound
	}
	return c.Blob(http.StatusOK, "application/schema+json", s.ManifestSchema)
}

// readBody reads the (limited) body.
func readBody(c echo.Context) ([]byte, error) {
	b, err := io.ReadAll(c.Request().Body)
	if err != nil {
		var mbe *http.MaxBytesError
		var ra *models.RetryAfterError // a budget of bodies read at once
		if errors.As(err, &mbe) || errors.As(err, &ra) {
			return nil, err
		}
		return nil, models.Invalid("body", "could not be read: "+err.Error())
	}
	return b, nil
}

// decodeStrict decodes one JSON value; unknown fields and trailing data are refused.
func decodeStrict(c echo.Context, v any) error {
	b, err := readBody(c)
	if err != nil {
		return err
	}
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		// null decodes into a zero request without a word: refused as such.
		return models.Invalid("body", "a JSON object is expected, not null")
	}
	if !utf8.Valid(b) {
		// encoding/json reads such bytes as U+FFFD: what was stored would
		// not be what was sent.
		return models.Invalid("body", "not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return models.Invalid("body", models.JSONWords(err))
	}
	if dec.More() {
		return models.Invalid("body", "trailing data after the JSON value")
	}
	return exactNames(b, v)
}

// exactNames refuses what encoding/json lets through a strict decode: a
// member given twice (the last one taken) and a member named in another
// case than its field (`NAME` taken as `name`). Either way the request
// the controller acts on is not the one a proxy or an auditor reading it
// by openapi.yaml sees. json v2 refuses both: its text decoder the
// duplicates, at any depth, and its decoder, case-sensitive, the names,
// decoding again into a throwaway value of v's type. Only those two are
// taken from it; the decode above judged everything else, in its words.
//
// The same walk refuses a NUL in any string: no field of a person's
// request is right with one, and PostgreSQL cannot store it where SQLite
// would, so the two stores answered the same request apart.
func exactNames(b []byte, v any) error {
	dec := jsontext.NewDecoder(bytes.NewReader(b), jsontext.AllowDuplicateNames(false))
	for {
		tok, err := dec.ReadToken()
		var sy *jsontext.SyntacticError
		if errors.Is(err, jsontext.ErrDuplicateName) && errors.As(err, &sy) {
			return models.Invalid("body", fmt.Sprintf("field %q is given twice", sy.JSONPointer.LastToken()))
		}
		if err != nil {
			break // the end, or what the decode above judged already
		}
		if tok.Kind() == '"' && strings.IndexByte(tok.String(), 0) >= 0 {
			return models.Invalid("body", fmt.Sprintf("%s may not contain a NUL character (\\u0000)", cmp.Or(string(dec.StackPointer()), "the body")))
		}
	}
	t := reflect.TypeOf(v)
	if t.Kind() != reflect.Pointer {
		return nil
	}
	err := jsonv2.Unmarshal(b, reflect.New(t.Elem()).Interface(), jsonv2.RejectUnknownMembers(true))
	var se *jsonv2.SemanticError
	if errors.Is(err, jsonv2.ErrUnknownName) && errors.As(err, &se) {
		return models.Invalid("body", fmt.Sprintf("unknown field %q (field names match in case)", se.JSONPointer.LastToken()))
	}
	return nil
}

// Pagination bounds.
const (
	DefaultLimit = 50
	MaxLimit     = 500
)

// page reads ?limit= (clamped to 1..500) and ?cursor=.
func page(c echo.Context) (int, string, error) {
	limit := DefaultLimit
	if l := c.QueryParam("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil {
			return 0, "", models.Invalid("limit", "a number")
		}
		limit = min(max(n, 1), MaxLimit)
	}
	return limit, c.QueryParam("cursor"), nil
}

// pageID reads a numeric cursor.
func pageID(c echo.Context) (int, int64, error) {
	limit, cur, err := page(c)
	if err != nil || cur == "" {
		return limit, 0, err
	}
	n, err := strconv.ParseInt(cur, 10, 64)
	if err != nil || n < 0 {
		return 0, 0, models.Invalid("cursor", "not a cursor this list gave")
	}
	return limit, n, nil
}

// List is a page of items, newest first.
type List[T any] struct {
	Items      []T    `json:"items"`
	NextCursor string `json:"next_cursor"`
}

func listOf[T any](items []T, limit int, cursor func(T) string) List[T] {
	l := List[T]{Items: items}
	if l.Items == nil {
		l.Items = []T{}
	}
	if len(items) == limit && limit > 0 {
		l.NextCursor = cursor(items[len(items)-1])
	}
	return l
}

// ifMatch reads If-Match: "<generation>"; nil when absent.
func ifMatch(c echo.Context) (*int64, error) {
	h := c.Request().Header.Get("If-Match")
	if h == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(strings.Trim(strings.TrimSpace(h), `"`), 10, 64)
	if err != nil {
		return nil, models.Invalid("If-Match", `the generation you read, quoted: "42"`)
	}
	return &n, nil
}

func setETag(c echo.Context, gen int64) {
	c.Response().Header().Set("ETag", fmt.Sprintf(`"%d"`, gen))
}

// storeWhy says why the store did not answer, without its internals.
func storeWhy(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within the store timeout (a lock held, or the network drops packets)"
	case errors.Is(err, models.ErrUnavailable):
		return "connection refused or lost"
	}
	return "it answered with an error (see the controller's log)"
}

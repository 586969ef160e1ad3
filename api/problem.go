package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// Problem is an RFC 9457 problem+json body. Type is stable; clients match it,
// never the text.
type Problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// ProblemType makes a stable problem type URI.
func ProblemType(slug string) string { return "urn:mesh:problem:" + slug }

// problemOf is the one place errors become statuses.
func problemOf(err error) Problem {
	var inv *models.InvalidError
	var he *echo.HTTPError
	var mbe *http.MaxBytesError
	var tf *models.TrialFailedError
	var nc *models.NotComposableError
	p := func(status int, slug, title string) Problem {
		return Problem{Type: ProblemType(slug), Title: title, Status: status, Detail: err.Error()}
	}
	switch {
	case errors.As(err, &mbe):
		// net/http's words name no limit: the detail says which.
		pr := p(http.StatusRequestEntityTooLarge, "too-large", "Request body too large")
		pr.Detail = fmt.Sprintf("the request's body is over this route's limit of %s", models.SizeWords(mbe.Limit))
		return pr
	case errors.As(err, &inv):
		return Problem{Type: ProblemType("invalid"), Title: "Invalid input", Status: http.StatusBadRequest, Detail: inv.Error()}
	case errors.Is(err, models.ErrNotFound):
		return p(http.StatusNotFound, "not-found", "Not found")
	case errors.Is(err, models.ErrStaleGeneration):
		return p(http.StatusPreconditionFailed, "stale-generation", "Changed since you read it")
	case errors.Is(err, models.ErrPreconditionNeeded):
		return p(http.StatusPreconditionRequired, "if-match-required", "If-Match is required")
	case errors.Is(err, models.ErrUnauthorized):
		return p(http.StatusUnauthorized, "unauthorized", "Not authenticated")
	case errors.Is(err, models.ErrForbidden):
		return p(http.StatusForbidden, "forbidden", "Not allowed")
	case errors.Is(err, models.ErrTokenUsed):
		return p(http.StatusForbidden, "join-token-refused", "Join token refused")
	case errors.Is(err, models.ErrDigestMismatch):
		return p(http.StatusUnprocessableEntity, "digest-mismatch", "Digest does not match")
	case errors.Is(err, models.ErrDowngrade):
		return p(http.StatusConflict, "downgrade-needs-reason", "Older build needs a reason")
	case errors.Is(err, models.ErrMachineConflict):
		return p(http.StatusConflict, "machine-conflict", "Machine is in conflict")
	case errors.As(err, &nc):
		return p(http.StatusConflict, "not-composable", "Cannot be composed")
	case errors.As(err, &tf):
		return p(http.StatusConflict, "trial-failed", "The trial of this host release failed")
	case errors.Is(err, models.ErrConflict):
		return p(http.StatusConflict, "conflict", "Conflict")
	case errors.Is(err, models.ErrTooManyRequests):
		return p(http.StatusTooManyRequests, "too-many-requests", "Too many requests")
	case errors.Is(err, models.ErrUnavailable):
		// Why, without the driver's words: they name the database, its
		// user and its address, to anyone who asks (those go to the log,
		// with the request's id).
		return Problem{Type: ProblemType("unavailable"), Title: "Store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "the store is unavailable: " + storeWhy(err) + "; try again shortly (the controller's log has the error under this request's id)"}
	case errors.Is(err, models.ErrDraining):
		return p(http.StatusServiceUnavailable, "draining", "Instance is draining")
	case errors.Is(err, models.ErrStarting):
		return p(http.StatusServiceUnavailable, "starting", "Instance is starting")
	case errors.Is(err, models.ErrStorageFull):
		// Why, without the store's own words (those go to the log).
		return Problem{Type: ProblemType("storage-full"), Title: "Insufficient storage", Status: http.StatusInsufficientStorage,
			Detail: models.ErrStorageFull.Error()}
	case errors.As(err, &he):
		msg, _ := he.Message.(string)
		if msg == "" {
			msg = http.StatusText(he.Code)
		}
		slug := map[int]string{404: "not-found", 405: "method-not-allowed", 413: "too-large", 401: "unauthorized"}[he.Code]
		if slug == "" {
			slug = "http"
		}
		return Problem{Type: ProblemType(slug), Title: http.StatusText(he.Code), Status: he.Code, Detail: msg}
	}
	return Problem{Type: ProblemType("internal"), Title: "Internal error", Status: http.StatusInternalServerError, Detail: "internal error"}
}

// errorHandler writes every error as problem+json. A 5xx says "internal
// error"; the detail goes to the log with the request id.
func (s *Server) errorHandler(err error, c echo.Context) {
	if c.Response().Committed {
		return
	}
	p := problemOf(err)
	var he *echo.HTTPError
	if behind := s.Behind.Why(); behind != "" && errors.As(err, &he) && (he.Code == http.StatusNotFound || he.Code == http.StatusMethodNotAllowed) && strings.HasPrefix(c.Request().URL.Path, "/api/") {
		// A route a newer build serves: say so, rather than "not found".
		p = Problem{Type: ProblemType("behind-store"), Title: "This controller is behind its store", Status: http.StatusNotImplemented,
			Detail: behind + "; this route is not served by this build"}
	} else if errors.As(err, &he) && he.Code == http.StatusNotFound && c.Path() == "" && strings.HasPrefix(c.Request().URL.Path, "/api/") {
		// No route at all (not a thing the route did not find): say which,
		// and where the routes are, rather than "Not Found".
		p.Detail = fmt.Sprintf("no route %s %s: the API's routes are in /openapi.yaml", c.Request().Method, models.Clip(c.Request().URL.Path, 200))
	} else if errors.As(err, &he) && he.Code == http.StatusMethodNotAllowed {
		// Which method, on what, and what it takes (echo sets Allow).
		p.Detail = fmt.Sprintf("%s is not allowed on %s", c.Request().Method, models.Clip(c.Request().URL.Path, 200))
		if allow := c.Response().Header().Get(echo.HeaderAllow); allow != "" {
			p.Detail += "; it takes " + allow
		}
	}
	var ra *models.RetryAfterError
	if errors.As(err, &ra) {
		c.Response().Header().Set("Retry-After", strconv.Itoa(max(1, int(math.Ceil(ra.After.Seconds())))))
	}
	rid := c.Response().Header().Get(echo.HeaderXRequestID)
	if p.Status >= 500 && !errors.Is(err, models.ErrDraining) {
		// A draining instance's 503 is the handover working (hosts move to
		// another instance), not a failure: one line per host would bury
		// the real errors of a restart under thousands.
		s.Log.Error("request failed", "err", err, "request_id", rid, "method", c.Request().Method, "path", c.Path())
	} else {
		s.Log.Debug("request refused", "err", err, "status", p.Status, "request_id", rid)
	}
	b, _ := json.Marshal(p)
	c.Response().Header().Set(echo.HeaderContentType, "application/problem+json")
	c.Response().WriteHeader(p.Status)
	_, _ = c.Response().Write(b)
}

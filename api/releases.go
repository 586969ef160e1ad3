package api

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// createRelease takes a multipart upload of a mesh-host binary with its
// version, os, arch and the declaration schemas it decodes; the controller stores it content-addressed and
// signs {version, os, arch, digest}.
func (s *Server) createRelease(c echo.Context) error {
	up, err := s.readUpload(c, "binary, version, os, arch and schemas", "binary", "version", "os", "arch", "schemas")
	if err != nil {
		return err
	}
	f := up.fields
	r, err := s.Service.CreateRelease(c.Request().Context(), principal(c).Actor(),
		&service.CreateRelease{Version: f["version"], OS: f["os"], Arch: f["arch"], Schemas: f["schemas"], Binary: up.file})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, r)
}

func (s *Server) listReleases(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	rs, err := s.Store.Releases(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	def, err := s.Store.HostDefault(c.Request().Context())
	if err != nil {
		return err
	}
	for i := range rs {
		rs[i].FleetDefault = def != "" && rs[i].Version == def
	}
	return c.JSON(http.StatusOK, listOf(rs, limit, func(r models.Release) string { return strconv.FormatInt(rs[len(rs)-1].ID, 10) }))
}

type rolloutRequest struct {
	Canary      json.RawMessage `json:"canary"`
	MaxInFlight *int64          `json:"max_in_flight"`
	Deadline    string          `json:"deadline"`
}

func (s *Server) startRollout(c echo.Context) error {
	var req rolloutRequest
	if c.Request().ContentLength != 0 {
		if err := decodeStrict(c, &req); err != nil {
			return err
		}
	}
	canary := "1"
	if len(req.Canary) > 0 {
		var n int64
		var p string
		switch {
		case json.Unmarshal(req.Canary, &n) == nil:
			canary = strconv.FormatInt(n, 10)
		case json.Unmarshal(req.Canary, &p) == nil:
			canary = p
		default:
			return models.Invalid("canary", `a count like 1 or a percent like "10%"`)
		}
	}
	inFlight := int64(1)
	if req.MaxInFlight != nil {
		if *req.MaxInFlight < 1 {
			return models.Invalid("max_in_flight", "at least 1")
		}
		inFlight = *req.MaxInFlight
	}
	deadline := service.DefaultRolloutDeadline
	if req.Deadline != "" {
		d, err := time.ParseDuration(req.Deadline)
		if err != nil || d < time.Second {
			return models.Invalid("deadline", "a duration of a second or more, like 10m")
		}
		deadline = d
	}
	v, err := s.Store.StartRollout(c.Request().Context(), principal(c).Actor(), c.Param("version"), canary, inFlight, int64(deadline/time.Second))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, v)
}

func (s *Server) getRollout(c echo.Context) error {
	v, err := s.Store.Rollout(c.Request().Context(), c.Param("version"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, v)
}

func (s *Server) rolloutAction(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		v, err := s.Store.SetRolloutState(c.Request().Context(), principal(c).Actor(), c.Param("version"), action)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, v)
	}
}

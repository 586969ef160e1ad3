package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

type planRequest struct {
	Module           string `json:"module"`
	Build            int64  `json:"build"`
	HostReleaseFirst string `json:"host_release_first"`
}

// createPlan starts a plan by hand (service.CreatePlan).
func (s *Server) createPlan(c echo.Context) error {
	var req planRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	v, err := s.Service.CreatePlan(c.Request().Context(), principal(c).Actor(),
		service.CreatePlan{Module: req.Module, Build: req.Build, HostReleaseFirst: req.HostReleaseFirst})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, v)
}

func planID(c echo.Context) (int64, error) {
	id, err := strconv.ParseInt(c.Param("id"), 10, 64)
	if err != nil || id <= 0 {
		return 0, models.Invalid("id", "a plan id")
	}
	return id, nil
}

func (s *Server) getPlan(c echo.Context) error {
	id, err := planID(c)
	if err != nil {
		return err
	}
	v, err := s.Store.Plan(c.Request().Context(), id)
	if err != nil {
		return err
	}
	v.MarkOffline(s.Rules, s.Hub.LastSeen, s.Now())
	return c.JSON(http.StatusOK, v)
}

func (s *Server) listPlans(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	ps, err := s.Store.Plans(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	for i := range ps {
		ps[i].MarkOffline(s.Rules, s.Hub.LastSeen, s.Now())
	}
	return c.JSON(http.StatusOK, listOf(ps, limit, func(p models.PlanView) string { return strconv.FormatInt(p.ID, 10) }))
}

func (s *Server) planAction(action string) echo.HandlerFunc {
	return func(c echo.Context) error {
		id, err := planID(c)
		if err != nil {
			return err
		}
		var seen models.PlanSeen
		if seen.Tier, err = seenCount("tier", c.QueryParam("tier"), "the plan's tier as it reads it (0 is the first)"); err != nil {
			return err
		}
		if seen.Moves, err = seenCount("moves", c.QueryParam("moves"), "the plan's moves as it reads them"); err != nil {
			return err
		}
		v, err := s.Store.ActOnPlan(c.Request().Context(), principal(c).Actor(), id, action, seen)
		if err != nil {
			return err
		}
		return c.JSON(http.StatusOK, v)
	}
}

// seenCount reads ?tier= or ?moves=, what the plan was when its reader
// decided to act (none: act on it whatever it is now).
func seenCount(field, q, what string) (*int64, error) {
	if q == "" {
		return nil, nil
	}
	n, err := strconv.ParseInt(q, 10, 64)
	if err != nil || n < 0 {
		return nil, models.Invalid(field, what+", a whole number")
	}
	return &n, nil
}

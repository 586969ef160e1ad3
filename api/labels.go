package api

import (
	"context"
	"net/http"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// LabelStore reads machines' labels, and the yanked builds their views
// point out.
type LabelStore interface {
	Labels(ctx context.Context, name string) (map[string]string, *models.Machine, error)
	YankedBuilds(ctx context.Context) (map[string]map[int64]string, error)
}

// registerLabels adds the routes of machines' labels.
func (s *Server) registerLabels(v1 *echo.Group) {
	v1.GET("/machines/:name/labels", s.getLabels, s.requireRole(models.RoleViewer))
	v1.PUT("/machines/:name/labels", s.putLabels, s.requireRole(models.RoleOperator))
}

// Labels is the body of GET/PUT …/labels.
type Labels struct {
	Labels map[string]string `json:"labels"`
}

// LabelsUpdate answers a label write: the labels, and the modules the
// machine gains and loses by them.
type LabelsUpdate struct {
	Labels  map[string]string        `json:"labels"`
	Changes []models.SelectionChange `json:"changes"`
	DryRun  bool                     `json:"dry_run"`
}

func (s *Server) getLabels(c echo.Context) error {
	ls, m, err := s.Store.Labels(c.Request().Context(), c.Param("name"))
	if err != nil {
		return err
	}
	setETag(c, m.Generation)
	return c.JSON(http.StatusOK, Labels{Labels: ls})
}

func (s *Server) putLabels(c echo.Context) error {
	var req Labels
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	im, err := ifMatch(c)
	if err != nil {
		return err
	}
	dry, err := dryRunParam(c)
	if err != nil {
		return err
	}
	r := service.SetLabels{Machine: c.Param("name"), Labels: req.Labels, IfMatch: im, DryRun: dry}
	ch, err := s.Service.SetLabels(c.Request().Context(), principal(c).Actor(), r)
	if err != nil {
		return err
	}
	if !dry {
		setETag(c, ch.Machine.Generation)
	}
	return c.JSON(http.StatusOK, LabelsUpdate{Labels: r.Labels, Changes: ch.Changes, DryRun: dry})
}

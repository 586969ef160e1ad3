package api

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// registerModuleEdits adds the routes that change or delete a module.
func (s *Server) registerModuleEdits(v1 *echo.Group) {
	v1.PATCH("/modules/:module", s.updateModule, s.requireRole(models.RoleOperator))
	v1.DELETE("/modules/:module", s.deleteModule, s.requireRole(models.RoleAdmin))
}

type updateModuleRequest struct {
	Repository   *string        `json:"repository"`
	SourcePaths  *[]string      `json:"source_paths"`
	Tiers        *[]models.Tier `json:"tiers"`
	TierDeadline *string        `json:"tier_deadline"`
	OnFailure    *string        `json:"on_failure"`
	Selector     *string        `json:"selector"`
}

// ModuleUpdate is the answer to a module's change: the module as it is (or
// would be), and the machines that gain or lose it by its selector.
type ModuleUpdate struct {
	Module  ModuleView               `json:"module"`
	Changes []models.SelectionChange `json:"changes"`
	DryRun  bool                     `json:"dry_run"`
}

// dryRunParam reads ?dry_run=true.
func dryRunParam(c echo.Context) (bool, error) {
	v := c.QueryParam("dry_run")
	if v == "" {
		return false, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, models.Invalid("dry_run", "true or false")
	}
	return b, nil
}

func (s *Server) updateModule(c echo.Context) error {
	var req updateModuleRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	dry, err := dryRunParam(c)
	if err != nil {
		return err
	}
	// Where a mesh-host module's builds come from is an admin's to say.
	if err := s.hostModuleByAdmin(c, c.Param("module")); err != nil {
		return err
	}
	ch, err := s.Service.UpdateModule(c.Request().Context(), principal(c).Actor(), service.UpdateModule{
		Name: c.Param("module"), Repository: req.Repository, SourcePaths: req.SourcePaths, Tiers: req.Tiers,
		TierDeadline: req.TierDeadline, OnFailure: req.OnFailure, Selector: req.Selector,
		IfMatch: c.Request().Header.Get("If-Match"), DryRun: dry})
	if err != nil {
		return err
	}
	v, err := moduleView(ch.Module)
	if err != nil {
		return err
	}
	if !dry {
		c.Response().Header().Set("ETag", ch.Module.ETag())
	}
	return c.JSON(http.StatusOK, ModuleUpdate{Module: v, Changes: ch.Changes, DryRun: dry})
}

func (s *Server) deleteModule(c echo.Context) error {
	if err := s.Service.DeleteModule(c.Request().Context(), principal(c).Actor(), c.Param("module")); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

package api

import (
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// ServiceLogList is a machine's latest shipped lines, one item per
// resource (one when a resource was asked for).
type ServiceLogList struct {
	Machine string                  `json:"machine"`
	Items   []models.ServiceLogView `json:"items"`
}

// machineLogs answers the latest lines the machine's host shipped of a
// service (or of every service that shipped any), with when they were
// shipped. A host ships them with a report when a service failed,
// restarted or turned unhealthy; nothing is fetched from the host.
func (s *Server) machineLogs(c echo.Context) error {
	resource := c.QueryParam("resource")
	if resource != "" {
		if err := models.ValidResourceID(resource); err != nil {
			return models.Invalid("resource", err.Error())
		}
	}
	tail, err := models.ParseTail(c.QueryParam("tail"))
	if err != nil {
		return err
	}
	ctx := c.Request().Context()
	m, err := s.Store.Machine(ctx, c.Param("name"))
	if err != nil {
		return err
	}
	rows, err := s.Store.ServiceLogs(ctx, m.ID, resource)
	if err != nil {
		return err
	}
	if resource != "" && len(rows) == 0 {
		// A module its host has not reported running may not be there at
		// all: say so, rather than that its services have been quiet.
		running, err := m.RunningBuilds()
		if err != nil {
			return err
		}
		runs := false
		for mod := range running {
			// A module's name may hold dots: the resource is one of its
			// if it begins with the name and a dot.
			runs = runs || strings.HasPrefix(resource, mod+".")
		}
		if !runs && len(running) < models.MaxRunning { // past it, the report's list was cut
			names := slices.Sorted(maps.Keys(running))
			return fmt.Errorf("%w: machine %s has shipped no lines of %s, and its host has not reported running its module (its last applied report names %s)",
				models.ErrNotFound, m.Name, resource, orNone(names))
		}
		return fmt.Errorf("%w: machine %s has shipped no lines of %s (a host ships a service's last lines when it fails, restarts or turns unhealthy)",
			models.ErrNotFound, m.Name, resource)
	}
	out := ServiceLogList{Machine: m.Name, Items: make([]models.ServiceLogView, len(rows))}
	for i := range rows {
		out.Items[i] = rows[i].View(tail)
		if out.Items[i].Lines == nil {
			out.Items[i].Lines = []string{}
		}
	}
	return c.JSON(http.StatusOK, out)
}

// orNone lists names for a message, or says there are none.
func orNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

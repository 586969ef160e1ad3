package web

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

func (s *Server) modulesPage(c echo.Context) error {
	return s.renderModules(c, http.StatusOK, "", "", 0, "")
}

// renderModules renders the Modules page; after a refused act, with its
// notice and the reason typed for module's build kept in its form.
func (s *Server) renderModules(c echo.Context, status int, notice, module string, build int64, typed string) error {
	ctx := c.Request().Context()
	mods, err := allModules(ctx, s.Store)
	if err != nil {
		return err
	}
	var out []ModuleView
	for _, m := range mods {
		v := ModuleView{Name: m.Name, Kind: m.Kind, Current: "none", CurrentReason: m.CurrentReason, BackFrom: m.CurrentBackFrom}
		if m.CurrentBuild != nil {
			v.Current = strconv.FormatInt(*m.CurrentBuild, 10)
		}
		bs, _, err := s.Store.Builds(ctx, m.Name, 20, 0)
		if err != nil {
			return err
		}
		for _, b := range bs {
			d := b.Digest
			if len(d) > 19 {
				d = d[:19] + "…"
			}
			row := BuildRow{Number: b.Number, Version: b.Version, Commit: b.Commit, Digest: d,
				CreatedBy: b.CreatedBy, CreatedAt: stamp(b.CreatedAt), Current: m.CurrentBuild != nil && *m.CurrentBuild == b.Number,
				Older: m.CurrentBuild != nil && b.Number < *m.CurrentBuild, State: b.State}
			switch b.State {
			case models.BuildYanked:
				// The word says when it became true, and by whom.
				row.Unusable = "yanked"
				if b.YankedAt != nil {
					row.Unusable += " " + stamp(*b.YankedAt)
				}
				if b.YankedBy != "" {
					row.Unusable += " by " + b.YankedBy
				}
				row.Unusable += ": " + b.YankReason
			case models.BuildReady, "":
			default:
				row.Unusable = b.State
			}
			if m.Name == module && b.Number == build {
				row.Typed = typed
			}
			v.Builds = append(v.Builds, row)
		}
		out = append(out, v)
	}
	return s.render(c, status, ModulesPage(s.page(c, "Modules"), out, notice))
}

// promote makes a build current everywhere (a person's explicit act).
func (s *Server) promote(c echo.Context) error {
	n, err := strconv.ParseInt(c.FormValue("build"), 10, 64)
	if err != nil {
		return s.errorPage(c, http.StatusBadRequest, "Not a build number.")
	}
	reason := c.FormValue("reason")
	if _, err := s.Store.SetCurrent(c.Request().Context(), "user:"+who(c).User, c.Param("module"), n, reason); err != nil {
		// The page again, as it is now, with what was typed: an error
		// page of its own lost the reason.
		notice := "Not made current: " + problemText(err)
		if strings.TrimSpace(reason) != "" {
			notice += fmt.Sprintf(" The reason you typed is kept: %q.", reason)
		}
		return s.renderModules(c, http.StatusBadRequest, notice, c.Param("module"), n, reason)
	}
	return c.Redirect(http.StatusSeeOther, "/modules")
}

func (s *Server) instancesPage(c echo.Context) error {
	is, err := s.Store.Instances(c.Request().Context(), 100)
	if err != nil {
		return err
	}
	now := time.Now()
	for i := range is {
		is[i] = is[i].Observed(now)
	}
	return s.render(c, http.StatusOK, InstancesPage(s.page(c, "Instances"), is))
}

func (s *Server) auditPage(c echo.Context) error {
	// ?target= is one thing's events (a machine's page links to its own).
	target := c.QueryParam("target")
	if len(target) > 300 {
		return models.Invalid("target", "at most 300 characters")
	}
	es, err := s.Store.AuditEventsWhere(c.Request().Context(), auditPageSize, 0, models.AuditFilter{Target: target})
	if err != nil {
		return err
	}
	return s.render(c, http.StatusOK, AuditPage(s.page(c, "Audit"), es, target))
}

func (s *Server) releasesPage(c echo.Context) error {
	ctx := c.Request().Context()
	rs, err := s.Store.Releases(ctx, 100, 0)
	if err != nil {
		return err
	}
	def, err := s.Store.HostDefault(ctx)
	if err != nil {
		return err
	}
	rows := make([]ReleaseRow, 0, len(rs))
	seen := map[string]*RolloutRow{}
	for _, r := range rs {
		row := ReleaseRow{Release: r}
		ro, ok := seen[r.Version]
		if !ok {
			if v, err := s.Store.Rollout(ctx, r.Version); err == nil {
				ro = &RolloutRow{State: v.State, Reason: v.Reason, Made: made(v.CreatedBy, v.CreatedAt, v.State, v.FinishedAt)}
				for _, m := range v.Machines {
					ro.Machines = append(ro.Machines, RolloutMachineRow{Machine: m.Machine, Wave: m.Wave, State: m.State, Words: stateWords(m.State),
						Reason: m.Reason, When: when(m.State, m.StartedAt, m.FinishedAt, time.Now(), "not reached yet")})
				}
			}
			seen[r.Version] = ro
		}
		row.Rollout = ro
		rows = append(rows, row)
	}
	return s.render(c, http.StatusOK, ReleasesPage(s.page(c, "Releases"), rows, def))
}

// allModules reads every module, by name: a page of the newest 500 left a
// fleet's older modules off the Modules page and a machine's form.
func allModules(ctx context.Context, st interface {
	Modules(ctx context.Context, limit int, cursor int64) ([]models.Module, error)
}) ([]models.Module, error) {
	var out []models.Module
	for cursor := int64(0); ; {
		page, err := st.Modules(ctx, 500, cursor)
		if err != nil {
			return nil, err
		}
		out = append(out, page...)
		if len(page) < 500 {
			break
		}
		cursor = page[len(page)-1].ID
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

package api

import (
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"mesh/models"
	"mesh/service"
)

// registerPeople adds the routes of users' updates and API tokens.
func (s *Server) registerPeople(v1 *echo.Group) {
	anyone := s.requirePerson(func(string) error { return nil })
	v1.PATCH("/users/:name", s.updateUser, s.requireRole(models.RoleAdmin))
	v1.POST("/auth/password", s.changePassword, anyone)
	v1.POST("/api-tokens", s.createAPIToken, anyone)
	v1.GET("/api-tokens", s.listAPITokens, anyone)
	v1.DELETE("/api-tokens/:id", s.revokeAPIToken, anyone)
}

type updateUserRequest struct {
	Role     *string `json:"role"`
	Disabled *bool   `json:"disabled"`
}

// UserView is a user as an admin sees them after a change.
type UserView struct {
	Name       string     `json:"name"`
	Role       string     `json:"role"`
	CreatedAt  time.Time  `json:"created_at"`
	Disabled   bool       `json:"disabled"`
	DisabledAt *time.Time `json:"disabled_at,omitempty"`
	DisabledBy string     `json:"disabled_by,omitempty"`
}

func userView(u *models.User) UserView {
	return UserView{Name: u.Name, Role: u.Role, CreatedAt: u.CreatedAt, Disabled: u.DisabledAt != nil,
		DisabledAt: u.DisabledAt, DisabledBy: u.DisabledBy}
}

func (s *Server) updateUser(c echo.Context) error {
	var req updateUserRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	p := principal(c)
	u, err := s.Service.UpdateUser(c.Request().Context(), p.Actor(), p.User,
		service.UpdateUser{Name: c.Param("name"), Role: req.Role, Disabled: req.Disabled})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, userView(u))
}

type passwordRequest struct {
	CurrentPassword string `json:"current_password"`
	NewPassword     string `json:"new_password"`
}

// changePassword sets the caller's own password; every token of theirs,
// this one included, is revoked (204: log in again).
func (s *Server) changePassword(c echo.Context) error {
	var req passwordRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	p := principal(c)
	if p.APIToken {
		// A password is its person's, changed from their login: a token
		// made for a CI runner or a screen guessed at its owner's password
		// (and spent the owner's login throttle doing so).
		return fmt.Errorf("%w: an API token may not change its owner's password; log in (meshctl login) and change it from there", models.ErrForbidden)
	}
	if err := s.Service.ChangePassword(c.Request().Context(), p.User, req.CurrentPassword, req.NewPassword, c.RealIP()); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

type apiTokenRequest struct {
	Name      string `json:"name"`
	Role      string `json:"role"`
	ExpiresIn string `json:"expires_in"`
}

// APITokenView is an API token as listed: never the token nor its hash.
type APITokenView struct {
	ID         string     `json:"id"`
	Name       string     `json:"name"`
	User       string     `json:"user"`
	Role       string     `json:"role"`
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
	RevokedBy  string     `json:"revoked_by,omitempty"`
}

// createdAPIToken is the answer to a new token: the only time the token
// itself is shown.
type createdAPIToken struct {
	APITokenView
	Token string `json:"token"`
}

func (s *Server) apiTokenView(t *models.APIToken) APITokenView {
	return APITokenView{ID: t.ID, Name: t.Name, User: t.UserName, Role: t.Role, State: t.State(s.Now()),
		CreatedAt: t.CreatedAt, ExpiresAt: t.ExpiresAt, LastUsedAt: t.LastUsedAt, RevokedAt: t.RevokedAt, RevokedBy: t.RevokedBy}
}

func (s *Server) createAPIToken(c echo.Context) error {
	var req apiTokenRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	p := principal(c)
	if p.APIToken {
		// A token that made its successor would outlive its own
		// revocation through it: tokens are made from a login.
		return fmt.Errorf("%w: an API token may not make API tokens; log in (meshctl login) and make it from there", models.ErrForbidden)
	}
	tok, t, err := s.Service.CreateAPIToken(c.Request().Context(), p.Actor(), p.User, p.Role,
		service.CreateAPIToken{Name: req.Name, Role: req.Role, ExpiresIn: req.ExpiresIn})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, createdAPIToken{APITokenView: s.apiTokenView(t), Token: tok})
}

// builderTokenOnly refuses a builder's API token what is not a build's:
// a CI runner's token (an admin's, made for it) claims queued builds and
// uploads their artifacts, nothing else — it listed and revoked its
// owner's other tokens.
func builderTokenOnly(p *Principal) error {
	if p.APIToken && p.Role == models.RoleBuilder {
		return fmt.Errorf("%w: a builder's API token may only claim builds and upload their artifacts", models.ErrForbidden)
	}
	return nil
}

// listAPITokens lists the caller's API tokens; an admin sees everyone's.
func (s *Server) listAPITokens(c echo.Context) error {
	limit, cur, err := page(c)
	if err != nil {
		return err
	}
	p := principal(c)
	if err := builderTokenOnly(p); err != nil {
		return err
	}
	user := p.User
	if p.Role == models.RoleAdmin {
		user = ""
	}
	ts, err := s.Store.APITokens(c.Request().Context(), user, limit, cur)
	if err != nil {
		return err
	}
	views := make([]APITokenView, len(ts))
	for i := range ts {
		views[i] = s.apiTokenView(&ts[i])
	}
	return c.JSON(http.StatusOK, listOf(views, limit, func(v APITokenView) string { return v.ID }))
}

func (s *Server) revokeAPIToken(c echo.Context) error {
	p := principal(c)
	if err := builderTokenOnly(p); err != nil {
		return err
	}
	if p.APIToken {
		// An API token acts with its own role, not its owner's: a viewer's
		// made for a screen revoked its owner's admin token for deploys.
		// A token it could not have made it may not revoke: a builder's
		// (an admin's to make) ranks below a viewer, and an admin's screen
		// token revoked the admin's CI runner's.
		t, err := s.Store.APIToken(c.Request().Context(), c.Param("id"))
		if err == nil && models.MayGrant(p.Role, t.Role) != nil {
			return fmt.Errorf("%w: this API token's role (%s) may not revoke a token of role %s; log in, or use a token of that role", models.ErrForbidden, p.Role, t.Role)
		}
	}
	t, err := s.Service.RevokeAPIToken(c.Request().Context(), p.Actor(), p.User, p.Role, c.Param("id"))
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.apiTokenView(t))
}

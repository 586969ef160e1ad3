package api

import (
	"fmt"
	"strings"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

func bearer(c echo.Context) (string, error) {
	h := c.Request().Header.Get("Authorization")
	if h == "" {
		return "", fmt.Errorf("%w: missing Authorization: Bearer token", models.ErrUnauthorized)
	}
	tok, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || tok == "" {
		return "", fmt.Errorf("%w: Authorization must be a Bearer token", models.ErrUnauthorized)
	}
	return tok, nil
}

// Principal is who made a request.
type Principal struct {
	User    string // a person or builder
	Role    string
	Machine string // a host
	hostID  int64
}

// Actor is how the audit log names the principal.
func (p *Principal) Actor() string {
	if p.Machine != "" {
		return "host:" + p.Machine
	}
	return "user:" + p.User
}

const principalKey = "mesh.principal"

func principal(c echo.Context) *Principal {
	p, _ := c.Get(principalKey).(*Principal)
	return p
}

// requireRole lets a person through when their role ranks at least min.
func (s *Server) requireRole(min string) echo.MiddlewareFunc {
	return s.requirePerson(func(role string) error {
		if models.RoleRank(role) < models.RoleRank(min) {
			return fmt.Errorf("%w: role %s may not do this (needs %s)", models.ErrForbidden, role, min)
		}
		return nil
	})
}

// requirePerson lets a person's token through when allowed says nothing
// against its role.
func (s *Server) requirePerson(allowed func(role string) error) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			tok, err := bearer(c)
			if err != nil {
				return err
			}
			claims, err := s.Auth.ParsePerson(tok)
			if err != nil {
				return err
			}
			if err := allowed(claims.Role); err != nil {
				return err
			}
			c.Set(principalKey, &Principal{User: claims.Subject, Role: claims.Role})
			return next(c)
		}
	}
}

// requireHost lets a host through. It checks the token against the hub's
// memory, never the store, so an idle poll costs the store nothing.
func (s *Server) requireHost(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		tok, err := bearer(c)
		if err != nil {
			return err
		}
		claims, err := s.Auth.ParseHost(tok)
		if err != nil {
			return err
		}
		id, ok := s.Hub.Authorize(claims.Subject, claims.ID)
		if !ok {
			// Enrolled through another instance since this one loaded:
			// the store decides, and the hub learns the machine.
			m, err := s.Store.Machine(c.Request().Context(), claims.Subject)
			if err != nil || m.TokenID != claims.ID {
				return fmt.Errorf("%w: host token of machine %s is not known here", models.ErrUnauthorized, claims.Subject)
			}
			s.Hub.Add(m)
			id = m.ID
		}
		c.Set(principalKey, &Principal{Machine: claims.Subject, hostID: id})
		return next(c)
	}
}

// requireHostOrViewer lets a host or any person through (blobs).
func (s *Server) requireHostOrViewer(next echo.HandlerFunc) echo.HandlerFunc {
	host := s.requireHost(next)
	person := s.requireRole(models.RoleViewer)(next)
	return func(c echo.Context) error {
		tok, err := bearer(c)
		if err != nil {
			return err
		}
		if _, err := s.Auth.ParseHost(tok); err == nil {
			return host(c)
		}
		return person(c)
	}
}

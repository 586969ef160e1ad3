package api

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

func (s *Server) listInstances(c echo.Context) error {
	limit, _, err := page(c)
	if err != nil {
		return err
	}
	is, err := s.Store.Instances(c.Request().Context(), limit)
	if err != nil {
		return err
	}
	now := s.Now()
	out := make([]models.Instance, len(is))
	for i := range is {
		out[i] = is[i].Observed(now)
	}
	return c.JSON(http.StatusOK, List[models.Instance]{Items: out})
}

func (s *Server) listAudit(c echo.Context) error {
	limit, cur, err := pageID(c)
	if err != nil {
		return err
	}
	es, err := s.Store.AuditEvents(c.Request().Context(), limit, cur)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, listOf(es, limit, func(e models.AuditEvent) string { return strconv.FormatInt(e.ID, 10) }))
}

// getBlob serves a content-addressed artifact with ETag and Range, read
// from the store a chunk at a time. A host may read only blobs a
// declaration of its machine named.
func (s *Server) getBlob(c echo.Context) error {
	d := c.Param("digest")
	if !models.ValidDigest(d) {
		return models.Invalid("digest", "sha256:<64 hex digits>")
	}
	ctx := c.Request().Context()
	if p := principal(c); p.Machine != "" {
		ok, err := s.Store.BlobSent(ctx, p.hostID, d)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%w: no declaration of machine %s names %s", models.ErrForbidden, p.Machine, d)
		}
	}
	b, content, err := s.Store.OpenBlob(ctx, d)
	if err != nil {
		return err
	}
	h := c.Response().Header()
	h.Set("ETag", `"`+d+`"`)
	h.Set("Digest", "sha-256="+d[7:])
	h.Set("Cache-Control", "private, max-age=31536000, immutable")
	h.Set(echo.HeaderContentType, "application/octet-stream")
	// content reads only the chunks the request's range touches, one at a
	// time; If-None-Match and If-Range are judged against the ETag.
	http.ServeContent(c.Response(), c.Request(), strings.ReplaceAll(d, ":", "-"), b.CreatedAt, content)
	return nil
}

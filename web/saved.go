package web

import (
	"net/http"
	"net/url"

	"github.com/labstack/echo/v4"
)

// SavedCookie carries what a form just saved to the page it redirects to.
// A query parameter would let any link put words of its own in the page's
// "saved" notice (the dashboard saying a machine applied what it never
// did); a cookie only this server sets, for that page's path, the next
// page shows once and clears.
const SavedCookie = "mesh_saved"

// savedFor is how long a notice waits for its page: the redirect's own
// round trip.
const savedFor = 60 // seconds

// redirectSaved redirects to path with the notice text shown there.
func (s *Server) redirectSaved(c echo.Context, path, text string) error {
	c.SetCookie(&http.Cookie{Name: SavedCookie, Value: url.QueryEscape(text), Path: path, MaxAge: savedFor, HttpOnly: true,
		Secure: s.secure(c), SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusSeeOther, path)
}

// takeSaved is the notice a form left for this page ("" for none), cleared
// as it is shown.
func (s *Server) takeSaved(c echo.Context) string {
	ck, err := c.Cookie(SavedCookie)
	if err != nil || ck.Value == "" {
		return ""
	}
	c.SetCookie(&http.Cookie{Name: SavedCookie, Value: "", Path: c.Request().URL.Path, MaxAge: -1, HttpOnly: true,
		Secure: s.secure(c), SameSite: http.SameSiteStrictMode})
	text, err := url.QueryUnescape(ck.Value)
	if err != nil {
		return ""
	}
	return text
}

package api

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"mesh/models"
)

// postServiceCertificate signs a CSR a host made for one of its machine's
// certificate resources (schema 2), for the names that machine's
// declaration gives it. This is a service's certificate, not the
// machine's own: the key never leaves the machine, only its CSR comes.
func (s *Server) postServiceCertificate(c echo.Context) error {
	p := principal(c)
	// A hundred at once (a machine's certificate resources at its first
	// apply), then one a second: each reads the store; the signatures are
	// paced per resource by the service.
	if err := s.serviceCertLimit.take("machine " + p.Machine); err != nil {
		s.recordThrottled(c, p.Machine, "service-certificate-refused", err)
		return err
	}
	var req models.CertificateRequest
	if err := decodeStrict(c, &req); err != nil {
		return err
	}
	out, err := s.Service.IssueServiceCertificate(c.Request().Context(), s.ServiceCA, p.hostID, p.Machine, req)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusCreated, out)
}

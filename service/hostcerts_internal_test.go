package service

import (
	"errors"
	"testing"

	"mesh/models"
)

// TestServiceCertificate_NotTheControllersNames: a service certificate is
// signed by the mesh CA that hosts and meshctl trust for the controller,
// so none may name what the controller serves under — its advertised
// names, a wildcard over them, or the local names every serving
// certificate carries — else whoever wrote a module's manifest could pose
// as the controller (an operator's module captured the admin's password).
func TestServiceCertificate_NotTheControllersNames(t *testing.T) {
	c := MachineCerts{ControllerNames: []string{"ctl.example.net", "10.0.0.5"}}
	for _, names := range [][]string{
		{"web.mesh", "ctl.example.net"}, {"CTL.example.net."}, {"*.example.net"}, {"localhost"}, {"::1"},
	} {
		if err := c.notTheControllers(names); !errors.Is(err, models.ErrForbidden) {
			t.Errorf("%v: %v, want forbidden", names, err)
		}
	}
	for _, names := range [][]string{{"web.mesh", "web.m1.mesh"}, {"*.mesh"}, {"ctl.example.net.evil"}, {"*.ctl.example.net"}} {
		if err := c.notTheControllers(names); err != nil {
			t.Errorf("%v: %v, want allowed", names, err)
		}
	}
}

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

// TestServiceCertificate_NotANameUnderTheControllersWildcard: a controller
// advertised as a wildcard (--advertise '*.mesh.example') is reached by
// hosts as any one name under it; a service certificate for such a name
// (ctl.mesh.example) was signed, and its holder could pose as the
// controller there.
func TestServiceCertificate_NotANameUnderTheControllersWildcard(t *testing.T) {
	c := MachineCerts{ControllerNames: []string{"*.mesh.example"}}
	for _, names := range [][]string{{"ctl.mesh.example"}, {"CTL.Mesh.Example."}, {"*.mesh.example"}} {
		if err := c.notTheControllers(names); !errors.Is(err, models.ErrForbidden) {
			t.Errorf("%v: %v, want forbidden", names, err)
		}
	}
	for _, names := range [][]string{{"a.ctl.mesh.example"}, {"mesh.example"}, {"ctl.mesh.example.evil"}} {
		if err := c.notTheControllers(names); err != nil {
			t.Errorf("%v: %v, want allowed", names, err)
		}
	}
}

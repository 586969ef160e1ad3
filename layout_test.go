package mesh_test

import (
	"os/exec"
	"strings"
	"testing"
)

// goList runs `go list` with a template over one package.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	out, err := exec.Command("go", append([]string{"list"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("go list %v: %v\n%s", args, err, out)
	}
	return strings.Fields(string(out))
}

// TestLayout_DependenciesPointInward keeps DESIGN.md's layout true: the
// dashboard never reaches into the API or the host; the API and the
// dashboard reach the store only through the service and the interfaces
// they declare; models imports no sibling package.
func TestLayout_DependenciesPointInward(t *testing.T) {
	t.Run("WebDependsOnNeitherAPINorAgent", func(t *testing.T) {
		for _, d := range goList(t, "-deps", "mesh/web") {
			if d == "mesh/api" || d == "mesh/agent" {
				t.Errorf("mesh/web depends on %s", d)
			}
		}
	})
	for _, pkg := range []string{"mesh/api", "mesh/web"} {
		t.Run(strings.TrimPrefix(pkg, "mesh/")+"ImportsNoStore", func(t *testing.T) {
			for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, pkg) {
				if imp == "mesh/store" || strings.HasPrefix(imp, "gorm.io/") {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		})
	}
	t.Run("ModelsImportsNoSibling", func(t *testing.T) {
		for _, imp := range goList(t, "-f", `{{join .Imports " "}}`, "mesh/models") {
			if strings.HasPrefix(imp, "mesh/") || strings.HasPrefix(imp, "gorm.io/") && imp != "gorm.io/gorm" {
				t.Errorf("mesh/models imports %s", imp)
			}
		}
	})
	t.Run("AgentImportsNoControllerSide", func(t *testing.T) {
		for _, d := range goList(t, "-deps", "mesh/agent") {
			switch d {
			case "mesh/api", "mesh/web", "mesh/store", "mesh/service", "mesh/hub":
				t.Errorf("mesh/agent depends on %s", d)
			}
		}
	})
}

package api

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestDashboard_QueriesOnlyWhatIsExported: dist/grafana/mesh.json is valid
// JSON, every panel has a query, and every metric a query names is one
// /metrics exports (a histogram by its _bucket, _sum or _count series).
func TestDashboard_QueriesOnlyWhatIsExported(t *testing.T) {
	b, err := os.ReadFile("../dist/grafana/mesh.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("mesh.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("mesh.json has no panels")
	}

	exported := map[string]bool{}
	ch := make(chan *prometheus.Desc, 1024)
	for _, c := range (&Server{}).collectors() {
		c.Describe(ch)
	}
	close(ch)
	fq := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range ch {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			exported[m[1]] = true
		}
	}
	fleet := []string{"mesh_machines", "mesh_machines_health", "mesh_plans", "mesh_rollouts", "mesh_checks_failing",
		"mesh_compose_errors", "mesh_plan_tier_duration_seconds", "mesh_sends_total"}
	for _, want := range fleet {
		if !exported[want] {
			t.Errorf("%s is not exported", want)
		}
	}

	name := regexp.MustCompile(`\b(?:mesh|go|process)_[a-z0-9_]+`)
	queried := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			names := name.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: %q names no metric", p.Title, tg.Expr)
			}
			for _, n := range names {
				base := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if s, ok := strings.CutSuffix(n, suffix); ok && exported[s] {
						base = s
					}
				}
				if !exported[base] {
					t.Errorf("panel %q queries %s, which the controller does not export", p.Title, n)
				}
				queried[base] = true
			}
		}
	}
	for _, want := range fleet {
		if !queried[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

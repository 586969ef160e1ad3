package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strings"
	"testing"

	"mesh"
	"mesh/controller/ctltest"
	"mesh/store"
)

// servedRoutes are the API routes the router serves, as "METHOD /path/{param}".
func servedRoutes(t *testing.T, e *ctltest.Env) map[string]bool {
	t.Helper()
	param := regexp.MustCompile(`:([a-z_]+)`)
	served := map[string]bool{}
	for _, r := range e.Ctl.Echo.Routes() {
		if r.Method == "echo_route_not_found" || strings.HasSuffix(r.Path, "/*") {
			continue
		}
		// The dashboard's HTML pages and static assets are not the API.
		if !strings.HasPrefix(r.Path, "/api/") && !strings.HasPrefix(r.Path, "/install") && !map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true, "/openapi.yaml": true, "/schemas/manifest.json": true}[r.Path] {
			continue
		}
		served[r.Method+" "+param.ReplaceAllString(r.Path, "{$1}")] = true
	}
	if len(served) < 30 {
		t.Fatalf("only %d routes read from the router", len(served))
	}
	return served
}

// TestSpec_RoutesAgree proves the router and openapi.yaml list the same routes.
func TestSpec_RoutesAgree(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	doc, _ := ctltest.Spec(t)
	served := servedRoutes(t, e)
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented[method+" "+path] = true
		}
	}
	var diff []string
	for r := range served {
		if !documented[r] {
			diff = append(diff, "served but not in openapi.yaml: "+r)
		}
	}
	for r := range documented {
		if !served[r] {
			diff = append(diff, "in openapi.yaml but not served: "+r)
		}
	}
	sort.Strings(diff)
	if len(diff) > 0 {
		t.Fatal(strings.Join(diff, "\n"))
	}
}

// TestSpec_EveryRouteHasOperationID proves every served route has an
// operation with an operationId, unique across the spec: the generated
// client names its methods from them (ListMachinesWithResponse, …).
func TestSpec_EveryRouteHasOperationID(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	doc, _ := ctltest.Spec(t)
	seen := map[string]string{}
	var bad []string
	for r := range servedRoutes(t, e) {
		method, path, _ := strings.Cut(r, " ")
		item := doc.Paths.Find(path)
		if item == nil || item.GetOperation(method) == nil {
			bad = append(bad, "no operation for "+r)
			continue
		}
		id := item.GetOperation(method).OperationID
		switch {
		case id == "":
			bad = append(bad, "no operationId on "+r)
		case seen[id] != "":
			bad = append(bad, fmt.Sprintf("operationId %s on both %s and %s", id, seen[id], r))
		}
		seen[id] = r
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Fatal(strings.Join(bad, "\n"))
	}
}

// TestSpec_UndocumentedFieldFails proves response validation has teeth: a
// real response passes, the same with one extra field does not.
func TestSpec_UndocumentedFieldFails(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	resp, body := e.Do(ctltest.Request{Method: "GET", Path: "/api/v1/machines/m1", Token: e.Admin})
	req, _ := http.NewRequest("GET", e.URL+"/api/v1/machines/m1", nil)
	if err := ctltest.ValidateResponse(t, req, resp.StatusCode, resp.Header, body); err != nil {
		t.Fatalf("real response fails: %v", err)
	}
	extra := []byte(strings.Replace(string(body), `{"name"`, `{"undocumented":1,"name"`, 1))
	if err := ctltest.ValidateResponse(t, req, resp.StatusCode, resp.Header, extra); err == nil {
		t.Fatal("a response with an undocumented field passed validation")
	}
	missing := []byte(strings.Replace(string(body), `"state":`, `"statez":`, 1))
	if err := ctltest.ValidateResponse(t, req, resp.StatusCode, resp.Header, missing); err == nil {
		t.Fatal("a response missing a required field passed validation")
	}
}

// TestSpec_ManifestSchemaServed: the manifest's JSON Schema is served
// without a token (a builder's CI validates against it before it logs in),
// as the bytes of schemas/manifest.json.
func TestSpec_ManifestSchemaServed(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	resp, b := e.Do(ctltest.Request{Method: http.MethodGet, Path: "/schemas/manifest.json"})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "application/schema+json" {
		t.Fatalf("status %d, content type %q: %.200s", resp.StatusCode, resp.Header.Get("Content-Type"), b)
	}
	if !bytes.Equal(b, mesh.ManifestSchema) {
		t.Fatal("served schema differs from schemas/manifest.json")
	}
}

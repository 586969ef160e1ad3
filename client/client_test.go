package client_test

import (
	"bytes"
	"context"
	"fmt"
	"mime/multipart"
	"net/http"
	"testing"

	"mesh/client"
	"mesh/controller/ctltest"
	"mesh/store"
)

// bearer sends a token with one call.
func bearer(tok string) client.RequestEditorFn {
	return func(_ context.Context, req *http.Request) error {
		req.Header.Set("Authorization", "Bearer "+tok)
		return nil
	}
}

// newClient talks to a real controller through the test harness's HTTP
// client, which checks every response against openapi.yaml as well.
func newClient(t *testing.T, e *ctltest.Env) *client.ClientWithResponses {
	t.Helper()
	c, err := client.NewClientWithResponses(e.URL, client.WithHTTPClient(e.HTTP))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// buildUpload encodes a BuildUpload as the multipart body createBuild reads.
func buildUpload(t *testing.T, u client.BuildUpload, artifact []byte) (string, *bytes.Buffer) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fields := map[string]*string{"version": u.Version, "commit": u.Commit, "digest": u.Digest}
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(mw.WriteField("manifest", u.Manifest))
	for k, v := range fields {
		if v != nil {
			must(mw.WriteField(k, *v))
		}
	}
	if artifact != nil {
		w, err := mw.CreateFormFile("artifact", "artifact.tar.gz")
		must(err)
		_, err = w.Write(artifact)
		must(err)
	}
	must(mw.Close())
	return mw.FormDataContentType(), &buf
}

func ptr[T any](v T) *T { return &v }

// TestClient_LoginAndListMachines: a user made through the client logs in
// and lists the machine a host enrolled through the client.
func TestClient_LoginAndListMachines(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	c := newClient(t, e)
	ctx := context.Background()

	user, err := c.CreateUserWithResponse(ctx, client.CreateUserJSONRequestBody{Name: "ops", Role: client.UserRequestRoleViewer,
		Password: "a long enough password"}, bearer(e.Admin))
	if err != nil || user.JSON201 == nil {
		t.Fatalf("createUser: %v %d %s", err, user.StatusCode(), user.Body)
	}
	login, err := c.LoginWithResponse(ctx, client.LoginJSONRequestBody{Username: "ops", Password: "a long enough password"})
	if err != nil || login.JSON200 == nil || login.JSON200.Token == "" {
		t.Fatalf("login: %v %d %s", err, login.StatusCode(), login.Body)
	}
	wrong, err := c.LoginWithResponse(ctx, client.LoginJSONRequestBody{Username: "ops", Password: "not the password"})
	if err != nil || wrong.ApplicationproblemJSON401 == nil || wrong.ApplicationproblemJSON401.Type != "urn:mesh:problem:unauthorized" {
		t.Fatalf("login with a wrong password: %v %d %s", err, wrong.StatusCode(), wrong.Body)
	}

	jt, err := c.CreateJoinTokenWithResponse(ctx, client.CreateJoinTokenJSONRequestBody{ExpiresIn: ptr("1h")}, bearer(e.Admin))
	if err != nil || jt.JSON201 == nil {
		t.Fatalf("createJoinToken: %v %d %s", err, jt.StatusCode(), jt.Body)
	}
	enrolled, err := c.EnrollWithResponse(ctx, client.EnrollJSONRequestBody{JoinToken: jt.JSON201.Token, Name: "m1", Os: "linux", Arch: "amd64"})
	if err != nil || enrolled.JSON201 == nil || enrolled.JSON201.Machine != "m1" || len(enrolled.JSON201.Keys) == 0 {
		t.Fatalf("enroll: %v %d %s", err, enrolled.StatusCode(), enrolled.Body)
	}

	list, err := c.ListMachinesWithResponse(ctx, &client.ListMachinesParams{Limit: ptr(10)}, bearer(login.JSON200.Token))
	if err != nil || list.JSON200 == nil {
		t.Fatalf("listMachines: %v %d %s", err, list.StatusCode(), list.Body)
	}
	if len(list.JSON200.Items) != 1 || list.JSON200.Items[0].Name != "m1" {
		t.Fatalf("listMachines: %+v, want m1 alone", list.JSON200.Items)
	}
	anon, err := c.ListMachinesWithResponse(ctx, nil)
	if err != nil || anon.ApplicationproblemJSON401 == nil {
		t.Fatalf("listMachines without a token: %v %d %s", err, anon.StatusCode(), anon.Body)
	}
}

// TestClient_IfMatch: a write made from the generation read passes; the
// same If-Match again is stale (412).
func TestClient_IfMatch(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	e.Enroll("m1")
	c := newClient(t, e)
	ctx := context.Background()

	m, err := c.GetMachineWithResponse(ctx, "m1", bearer(e.Admin))
	if err != nil || m.JSON200 == nil {
		t.Fatalf("getMachine: %v %d %s", err, m.StatusCode(), m.Body)
	}
	etag := m.HTTPResponse.Header.Get("ETag")
	vars := client.SetVariablesJSONRequestBody{Variables: map[string]string{"port": "8080"}}
	set, err := c.SetVariablesWithResponse(ctx, "m1", &client.SetVariablesParams{IfMatch: etag}, vars, bearer(e.Admin))
	if err != nil || set.JSON200 == nil {
		t.Fatalf("setVariables: %v %d %s", err, set.StatusCode(), set.Body)
	}
	stale, err := c.SetVariablesWithResponse(ctx, "m1", &client.SetVariablesParams{IfMatch: etag}, vars, bearer(e.Admin))
	if err != nil || stale.ApplicationproblemJSON412 == nil || stale.ApplicationproblemJSON412.Type != "urn:mesh:problem:stale-generation" {
		t.Fatalf("setVariables from a stale generation: %v %d %s", err, stale.StatusCode(), stale.Body)
	}
}

// TestClient_UploadAfterFirstStartsPlan: the typed multipart upload works,
// and the second upload starts a plan, as the spec says of createBuild (the
// first became current: no plan of it).
func TestClient_UploadAfterFirstStartsPlan(t *testing.T) {
	e := ctltest.Start(t, store.SQLite)
	c := newClient(t, e)
	ctx := context.Background()

	mod, err := c.CreateModuleWithResponse(ctx, client.CreateModuleJSONRequestBody{Name: "tools"}, bearer(e.Admin))
	if err != nil || mod.JSON201 == nil {
		t.Fatalf("createModule: %v %d %s", err, mod.StatusCode(), mod.Body)
	}
	manifest := `{"resources": [{"name": "conf", "kind": "file", "path": "/etc/tools.conf", "content": "x"}]}`
	for n := 1; n <= 2; n++ {
		ct, body := buildUpload(t, client.BuildUpload{Manifest: manifest, Version: ptr(fmt.Sprintf("1.0.%d", n)), Commit: ptr("abc123")}, nil)
		b, err := c.CreateBuildWithBodyWithResponse(ctx, "tools", ct, body, bearer(e.Admin))
		if err != nil || b.JSON201 == nil || b.JSON201.Number != n {
			t.Fatalf("createBuild %d: %v %d %s", n, err, b.StatusCode(), b.Body)
		}
	}
	plans, err := c.ListPlansWithResponse(ctx, nil, bearer(e.Admin))
	if err != nil || plans.JSON200 == nil {
		t.Fatalf("listPlans: %v %d %s", err, plans.StatusCode(), plans.Body)
	}
	if len(plans.JSON200.Items) != 1 || plans.JSON200.Items[0].Module != "tools" || plans.JSON200.Items[0].Build != 2 {
		t.Fatalf("plans: %+v, want one of tools build 2", plans.JSON200.Items)
	}
	// The second upload again (a retry): its build, answered 200, typed.
	ct, body := buildUpload(t, client.BuildUpload{Manifest: manifest, Version: ptr("1.0.2"), Commit: ptr("abc123")}, nil)
	again, err := c.CreateBuildWithBodyWithResponse(ctx, "tools", ct, body, bearer(e.Admin))
	if err != nil || again.JSON200 == nil || again.JSON200.Number != 2 {
		t.Fatalf("createBuild again: %v %d %s", err, again.StatusCode(), again.Body)
	}

	ct, body = buildUpload(t, client.BuildUpload{Manifest: manifest, Digest: ptr("sha256:" + string(bytes.Repeat([]byte("0"), 64)))}, []byte("bytes"))
	bad, err := c.CreateBuildWithBodyWithResponse(ctx, "tools", ct, body, bearer(e.Admin))
	if err != nil || bad.ApplicationproblemJSON422 == nil || bad.ApplicationproblemJSON422.Type != "urn:mesh:problem:digest-mismatch" {
		t.Fatalf("createBuild with a wrong digest: %v %d %s", err, bad.StatusCode(), bad.Body)
	}
}

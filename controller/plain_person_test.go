package controller_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"mesh/controller"
	"mesh/controller/ctltest"
	"mesh/meshca"
	"mesh/store"
	"mesh/store/storetest"
)

// TestPlainHTTP_APersonsTokenIsNotServed: with --host-bearer-until, a
// controller serving TLS serves the host protocol over plain HTTP beside
// it, and every person's route there is refused, saying where TLS is —
// but /api/v1/blobs/, a host path, took a person's bearer token too: a
// viewer's token sent in the clear was accepted and the artifact served,
// so a script pointed at http:// by mistake worked and never learnt its
// token travelled in the clear.
func TestPlainHTTP_APersonsTokenIsNotServed(t *testing.T) {
	sc := storetest.Config(t, store.SQLite)
	var out bytes.Buffer
	c, err := controller.Start(context.Background(), controller.Config{Listen: "127.0.0.1:0", DataDir: sc.DataDir, DatabaseURL: sc.DatabaseURL,
		Out: &out, DrainTimeout: 5 * time.Second, Log: slog.New(slog.DiscardHandler),
		TLS: true, HostBearerUntil: time.Now().Add(24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	overTLS := ctltest.AttachWith(t, c.URL(), "", &http.Transport{TLSClientConfig: meshca.ClientConfig(c.CA.Cert)})
	pw := regexp.MustCompile(`password: (\S+)`).FindStringSubmatch(out.String())
	if pw == nil {
		t.Fatalf("no admin password in %q", out.String())
	}
	overTLS.Admin = overTLS.Login("admin", pw[1])
	viewer := overTLS.AddUser("vera", "viewer")
	resp, b := overTLS.UploadRelease(overTLS.Admin, "9.9.9", []byte("a host release's bytes"))
	var rel struct{ Digest string }
	if resp.StatusCode != 201 || json.Unmarshal(b, &rel) != nil || rel.Digest == "" {
		t.Fatalf("release: %d %s", resp.StatusCode, b)
	}

	plainURL := strings.Replace(c.URL(), "https://", "http://", 1)
	get := func(path string) (int, string) {
		req, _ := http.NewRequest("GET", plainURL+path, nil)
		req.Header.Set("Authorization", "Bearer "+viewer)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := get("/api/v1/machines"); st != 403 {
		t.Fatalf("the viewer's token over plain HTTP on /api/v1/machines: %d %s", st, body)
	}
	st, body := get("/api/v1/blobs/" + rel.Digest)
	if st != 403 || !strings.Contains(body, "https://") {
		t.Fatalf("the viewer's token over plain HTTP on /api/v1/blobs/: %d %.80q, want 403 saying where TLS is", st, body)
	}
	// Over TLS the same token is served.
	if resp, _ := overTLS.Do(ctltest.Request{Method: "GET", Path: "/api/v1/blobs/" + rel.Digest, Token: viewer}); resp.StatusCode != 200 {
		t.Fatalf("over TLS: %d", resp.StatusCode)
	}
}

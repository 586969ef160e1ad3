package api_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"mime/multipart"
	"strings"
	"testing"

	"mesh/controller/ctltest"
	"mesh/models"
)

// TestBlobs_UploadStreamedServedByRange: a build's artifact may come
// before its fields (here the digest comes last, as a client that hashes
// while it sends knows it only then); it is served back whole, by range
// and by ETag. A digest that does not match is 422, and no build is made.
func TestBlobs_UploadStreamedServedByRange(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: map[string]any{"name": "big"}}, 201, nil)
		art := make([]byte, 3<<20+17)
		r := rand.NewChaCha8([32]byte{9})
		_, _ = r.Read(art)
		digest := models.DigestOf(art)
		post := func(d string, extra ...string) (int, string) {
			var buf bytes.Buffer
			mw := multipart.NewWriter(&buf)
			w, _ := mw.CreateFormFile("artifact", "a.tar.gz")
			_, _ = w.Write(art)
			// Bytes no host unpacks as a tree: a tree naming its artifact
			// elsewhere, the build's kept as a blob.
			_ = mw.WriteField("manifest", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t", "artifact": {"url": "https://example.com/t.tar.gz", "digest": "`+models.DigestOf([]byte("t"))+`", "size": 1}}]}`)
			_ = mw.WriteField("digest", d)
			for _, k := range extra {
				_ = mw.WriteField(k, "x")
			}
			mw.Close()
			resp, body := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/modules/big/builds", Token: e.Admin, Body: buf.Bytes(),
				Header: map[string]string{"Content-Type": mw.FormDataContentType()}})
			return resp.StatusCode, string(body)
		}
		if st, body := post(models.DigestOf([]byte("other"))); st != 422 || !strings.Contains(body, "digest-mismatch") {
			t.Fatalf("a wrong digest: %d %s", st, body)
		}
		if st, body := post(digest, "colour"); st != 400 || !strings.Contains(body, "colour") {
			t.Fatalf("an unknown field: %d %s", st, body)
		}
		if st, body := post(digest); st != 201 || !strings.Contains(body, digest) {
			t.Fatalf("upload: %d %s", st, body)
		}
		var builds struct{ Items []struct{ Number int64 } }
		e.JSON(ctltest.Request{Method: "GET", Path: "/api/v1/modules/big/builds", Token: e.Admin}, 200, &builds)
		if len(builds.Items) != 1 {
			t.Fatalf("refused uploads made builds: %+v", builds.Items)
		}

		get := func(h map[string]string) (int, string, []byte) {
			resp, body := e.Do(ctltest.Request{Method: "GET", Path: models.BlobURL(digest), Token: e.Admin, Header: h})
			return resp.StatusCode, resp.Header.Get("ETag"), body
		}
		if st, etag, body := get(nil); st != 200 || etag != `"`+digest+`"` || !bytes.Equal(body, art) {
			t.Fatalf("whole: %d %s, %d bytes", st, etag, len(body))
		}
		if st, _, body := get(map[string]string{"Range": "bytes=0-99"}); st != 206 || !bytes.Equal(body, art[:100]) {
			t.Fatalf("bytes=0-99: %d, %d bytes", st, len(body))
		}
		if st, _, body := get(map[string]string{"Range": "bytes=1048570-1048589"}); st != 206 || !bytes.Equal(body, art[1048570:1048590]) {
			t.Fatalf("across a chunk boundary: %d, %d bytes", st, len(body))
		}
		// Many ranges are served as none (each re-reads its chunk: a
		// header of 30,000 kept a core busy 30 s); a few as asked.
		var many []string
		for i := range 17 {
			many = append(many, fmt.Sprintf("%d-%d", i<<17, i<<17))
		}
		if st, _, body := get(map[string]string{"Range": "bytes=" + strings.Join(many, ",")}); st != 200 || !bytes.Equal(body, art) {
			t.Fatalf("17 ranges: %d, %d bytes; want the whole blob", st, len(body))
		}
		if st, _, body := get(map[string]string{"Range": "bytes=" + strings.Join(many[:2], ",")}); st != 206 {
			t.Fatalf("2 ranges: %d, %d bytes; want 206", st, len(body))
		}
		if st, _, _ := get(map[string]string{"If-None-Match": `"` + digest + `"`}); st != 304 {
			t.Fatalf("If-None-Match the digest: %d", st)
		}
	})
}

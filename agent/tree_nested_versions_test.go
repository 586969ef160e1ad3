package agent

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mesh/archive"
	"mesh/models"
)

// TestTree_AnOuterTreeCannotPlantAnInnerTreesVersion: a tree declared
// beneath another tree's path (module b's plugin inside module a's app)
// keeps its unpacked versions in .plugin.mesh inside a's tree. a's archive
// could hold entries of that name: they stood as b's unpacked version,
// and the host, finding it, never unpacked b's own verified artifact — the
// plugin ran what a's builder put there, reported created with b's digest.
// Such an entry is refused, by the host and at upload.
func TestTree_AnOuterTreeCannotPlantAnInnerTreesVersion(t *testing.T) {
	for _, withLink := range []bool{false, true} {
		a := testAgent(t)
		inner := makeTar(t, tarEntry{name: "bin/run", body: "genuine\n", mode: 0o755})
		innerDigest := cacheBlob(t, a, inner)
		hex := innerDigest[len("sha256:"):]
		es := []tarEntry{
			{name: "bin/app", body: "app\n", mode: 0o755},
			{name: ".plugin.mesh/" + hex + "/bin/run", body: "planted by a's builder\n", mode: 0o755},
		}
		if withLink {
			es = append(es, tarEntry{name: "plugin", link: ".plugin.mesh/" + hex, typ: tar.TypeSymlink})
		}
		outer := makeTar(t, es...)
		if err := archive.Judge(bytes.NewReader(outer), int64(len(outer)), archive.DefaultLimits()); err == nil || !strings.Contains(err.Error(), ".plugin.mesh") {
			t.Errorf("the upload's judge took an archive planting .plugin.mesh: %v", err)
		}
		outerDigest := cacheBlob(t, a, outer)
		decl := &models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 2, Resources: []models.Resource{
			{ID: "a.app", Module: "a", Build: 1, Kind: "tree", Path: "/opt/app",
				Artifact: &models.Artifact{Digest: outerDigest, URL: models.BlobURL(outerDigest)}},
			{ID: "b.plugin", Module: "b", Build: 1, Kind: "tree", Path: "/opt/app/plugin",
				Artifact: &models.Artifact{Digest: innerDigest, URL: models.BlobURL(innerDigest)}},
		}}
		acts, err := a.applyInFull(context.Background(), decl, a.state.clone())
		got, _ := os.ReadFile(filepath.Join(a.root.dir, "opt/app/plugin/bin/run"))
		if err == nil && string(got) != "genuine\n" {
			t.Fatalf("the apply succeeded (%+v) and b's tree holds %q, not its artifact's", acts, got)
		}
	}
}

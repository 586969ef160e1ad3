package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"mesh/models"
	"mesh/store"
	"mesh/store/storetest"
)

// TestDeliver_AMergeKeepsFewOfItsPaths: a signed push naming 20,000 paths
// (a megabyte, under the webhook body's bound) queues the builds every one
// of its paths calls for — the last alone touches the module — and the
// merge keeps a hundred of them, each a line, and how many more there
// were: it kept them all, and forty such pushes were 200 MB kept for good.
func TestDeliver_AMergeKeepsFewOfItsPaths(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "deep", Kind: models.KindService, Repository: "o/r",
			SourcePaths: `["deep/"]`, Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		src := &models.Source{Name: "forge", Kind: models.ForgeGitea, Repository: "o/r", DefaultBranch: "main", Secret: strings.Repeat("s", 16)}
		if err := s.CreateSource(ctx, "test", src); err != nil {
			t.Fatal(err)
		}
		paths := make([]string, 20000)
		for i := range paths {
			paths[i] = fmt.Sprintf("docs/%s/%05d.md", strings.Repeat("p", 30), i)
		}
		paths[0] = "docs/\x00" + strings.Repeat("q", 1000)
		paths[len(paths)-1] = "deep/main.go"
		out, err := s.Deliver(ctx, src, "d1", "push", &models.Push{Ref: "refs/heads/main", Commit: strings.Repeat("a", 40), Repository: "o/r", Paths: paths}, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Builds) != 1 || out.Builds[0].Module != "deep" {
			t.Fatalf("queued %+v, want a build of deep (its path is the push's last)", out.Builds)
		}
		var kept string
		if err := s.DB().Raw("SELECT paths FROM merges WHERE id = ?", *out.Merge).Scan(&kept).Error; err != nil {
			t.Fatal(err)
		}
		var list []string
		if err := json.Unmarshal([]byte(kept), &list); err != nil {
			t.Fatal(err)
		}
		if len(kept) > 40<<10 || len(list) != 101 || list[100] != "… and 19900 more" || len(list[0]) > 300 || strings.Contains(list[0], "\x00") {
			t.Fatalf("the merge kept %d bytes, %d paths, the first %.40q, the last %q", len(kept), len(list), list[0], list[len(list)-1])
		}
	})
}

package api_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"mesh/controller/ctltest"
)

// pushOf is a push of main to octo-org/fleet, onto before, of one commit
// a path (or of the commits listed, total saying how many it had).
func pushOf(before, after string, total int, paths ...string) []byte {
	commits := []map[string]any{}
	for i, p := range paths {
		commits = append(commits, map[string]any{"id": fmt.Sprintf("%040x", i+1), "added": []string{}, "removed": []string{}, "modified": []string{p}})
	}
	push := map[string]any{"ref": "refs/heads/main", "before": before, "after": after,
		"repository": map[string]any{"full_name": "octo-org/fleet"}, "pusher": map[string]any{"name": "dev"}, "commits": commits}
	if total > 0 {
		push["total_commits"] = total
	}
	b, _ := json.Marshal(push)
	return b
}

// postPush delivers a push to source, signed as its kind signs.
func postPush(e *ctltest.Env, source, kind, delivery string, b []byte) (int, hookResult, string) {
	h := map[string]string{"X-GitHub-Event": "push", "X-GitHub-Delivery": delivery, "X-Hub-Signature-256": "sha256=" + sign(b)}
	if kind == "gitea" {
		h = map[string]string{"X-Gitea-Event": "push", "X-Gitea-Delivery": delivery, "X-Gitea-Signature": sign(b)}
	}
	resp, out := e.Do(ctltest.Request{Method: "POST", Path: "/api/v1/hooks/" + source, Body: b, Header: h})
	var r hookResult
	_ = json.Unmarshal(out, &r)
	return resp.StatusCode, r, string(out)
}

func fleetSource(e *ctltest.Env, kind, repository string, module map[string]any) {
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/sources", Token: e.Admin,
		Body: map[string]any{"name": "src", "kind": kind, "repository": repository, "default_branch": "main", "secret": hookSecret}}, 201, nil)
	e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin, Body: module}, 201, nil)
}

// TestWebhooks_RepositoryNamedInAnotherCaseStillBuilds: a source named
// "Octo-Org/Fleet" took a push for "octo-org/fleet" (forges take a name in
// any case) but looked its modules up by its own spelling exactly: the
// merge was recorded with no build, and the commit, merged, was never
// built again.
func TestWebhooks_RepositoryNamedInAnotherCaseStillBuilds(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "Octo-Org/Fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		st, r, raw := postPush(e, "src", "github", "d1", pushOf(strings.Repeat("a", 40), strings.Repeat("b", 40), 0, "web/main.go"))
		if st != 200 || len(r.Builds) != 1 {
			t.Fatalf("a push taken for the source's repository queued no build of its module: %d %s", st, raw)
		}
	})
}

// TestWebhooks_AGitHubPushListedInPartTouchesEveryModule: GitHub lists at
// most 2,048 commits of a push: a module touched only by the commits left
// out was never built.
func TestWebhooks_AGitHubPushListedInPartTouchesEveryModule(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		docs := make([]string, 2048)
		for i := range docs {
			docs[i] = "docs/README.md"
		}
		st, r, raw := postPush(e, "src", "github", "d1", pushOf(strings.Repeat("a", 40), strings.Repeat("b", 40), 0, docs...))
		if st != 200 || len(r.Builds) != 1 {
			t.Fatalf("a push listing GitHub's most commits (more may have been pushed) queued no build: %d %.300s", st, raw)
		}
		// Fewer than GitHub's most: judged by its paths.
		st, r, raw = postPush(e, "src", "github", "d2", pushOf(strings.Repeat("b", 40), strings.Repeat("c", 40), 0, docs[:2047]...))
		if st != 200 || len(r.Builds) != 0 {
			t.Fatalf("a push of 2,047 commits touching docs only: %d %.300s", st, raw)
		}
	})
}

// TestWebhooks_AGiteaPushListedInPartTouchesEveryModule: Gitea and Forgejo
// list at most a few commits of a push (5 by default) and say how many
// there were: a module touched only by the commits left out was never
// built.
func TestWebhooks_AGiteaPushListedInPartTouchesEveryModule(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "gitea", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		docs := []string{"docs/a", "docs/b", "docs/c", "docs/d", "docs/e"}
		st, r, raw := postPush(e, "src", "gitea", "d1", pushOf(strings.Repeat("a", 40), strings.Repeat("b", 40), 9, docs...))
		if st != 200 || len(r.Builds) != 1 {
			t.Fatalf("a push of 9 commits, 5 listed, queued no build: %d %s", st, raw)
		}
		st, r, raw = postPush(e, "src", "gitea", "d2", pushOf(strings.Repeat("b", 40), strings.Repeat("c", 40), 5, docs...))
		if st != 200 || len(r.Builds) != 0 {
			t.Fatalf("a push of 5 commits, all listed, touching docs only: %d %s", st, raw)
		}
	})
}

// TestWebhooks_AnOlderPushDeliveredLateIsNotBuiltAsNewer: a push onto A
// (A → B) delivered before the push that made A (X → A), as a forge's
// retries and queues may: A was queued as a newer build than B, so its
// plan superseded B's and rolled older code out.
func TestWebhooks_AnOlderPushDeliveredLateIsNotBuiltAsNewer(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		x, a, b := strings.Repeat("1", 40), strings.Repeat("a", 40), strings.Repeat("b", 40)
		st, r, raw := postPush(e, "src", "github", "d2", pushOf(a, b, 0, "web/x"))
		if st != 200 || len(r.Builds) != 1 {
			t.Fatalf("the newer push: %d %s", st, raw)
		}
		newer := r.Builds[0].Number
		st, r, raw = postPush(e, "src", "github", "d1", pushOf(x, a, 0, "web/x"))
		if st != 200 || len(r.Builds) != 0 || r.Merge == nil || !strings.Contains(r.Status, "not web (merge 1, bbbbbbb): merges made after it built them already") {
			t.Fatalf("commit %s, the one build %d's push was made onto, delivered late: %d %s", a[:7], newer, st, raw)
		}
		// Delivered again, it is a replay: the same body, or any merged commit.
		if _, r, raw = postPush(e, "src", "github", "d1b", pushOf(x, a, 0, "web/x")); !strings.HasPrefix(r.Status, "duplicate: ") || r.Merge != nil {
			t.Fatalf("the late push again: %s", raw)
		}
		// The next push in order builds as ever.
		if _, r, raw = postPush(e, "src", "github", "d3", pushOf(b, strings.Repeat("c", 40), 0, "web/x")); len(r.Builds) != 1 || r.Builds[0].Number != newer+1 {
			t.Fatalf("the push after: %s", raw)
		}
	})
}

// TestWebhooks_ALatePushOfAnotherModuleIsStillBuilt: X → A touched only
// api/, A → B only web/, delivered B first: B's builds (web's) do not hold
// A's change to api, yet the late push was recorded merged with no build,
// and api's change was never built.
func TestWebhooks_ALatePushOfAnotherModuleIsStillBuilt(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "api", "repository": "octo-org/fleet", "source_paths": []string{"api/"}}}, 201, nil)
		x, a, b, c := strings.Repeat("1", 40), strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
		if st, r, raw := postPush(e, "src", "github", "d3", pushOf(b, c, 0, "web/y")); st != 200 || len(r.Builds) != 1 || r.Builds[0].Module != "web" {
			t.Fatalf("the newest push: %d %s", st, raw)
		}
		if st, r, raw := postPush(e, "src", "github", "d2", pushOf(a, b, 0, "web/x")); st != 200 || len(r.Builds) != 0 {
			t.Fatalf("the push before it, touching web (built at c): %d %s", st, raw)
		}
		st, r, raw := postPush(e, "src", "github", "d1", pushOf(x, a, 0, "api/x", "web/z"))
		if st != 200 || len(r.Builds) != 1 || r.Builds[0].Module != "api" || !strings.Contains(r.Status, "not web") {
			t.Fatalf("the oldest push, touching api (built by none after it) and web: %d %s", st, raw)
		}
	})
}

// TestWebhooks_AForcePushBackIsBuilt: the first push seen was X → A (X
// never delivered: pushed before the source was set up). A force-push back
// to X (A → X) is a new state of the branch, made onto A, not an older
// push delivered late; it was recorded merged with no build.
func TestWebhooks_AForcePushBackIsBuilt(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		x, a := strings.Repeat("1", 40), strings.Repeat("a", 40)
		if st, r, raw := postPush(e, "src", "github", "d1", pushOf(x, a, 0, "web/x")); st != 200 || len(r.Builds) != 1 {
			t.Fatalf("the first push: %d %s", st, raw)
		}
		if st, r, raw := postPush(e, "src", "github", "d2", pushOf(a, x, 0, "web/x")); st != 200 || len(r.Builds) != 1 || r.Builds[0].Number != 2 {
			t.Fatalf("a force-push from %s back to %s queued no build: %d %s", a[:7], x[:7], st, raw)
		}
	})
}

// TestWebhooks_ABranchForcedBackAndPushedAgain: two merges were made onto
// commit A (A → B, then, the branch back at A, A → C). Only the first of
// them was followed: a force-push from C back to A (made onto C) was held
// as older, and a push delivered late behind A built api from an older
// commit as newer than C's build, which held it. The status named a merge
// that built nothing as the one that built the module.
func TestWebhooks_ABranchForcedBackAndPushedAgain(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		e.JSON(ctltest.Request{Method: "POST", Path: "/api/v1/modules", Token: e.Admin,
			Body: map[string]any{"name": "api", "repository": "octo-org/fleet", "source_paths": []string{"api/"}}}, 201, nil)
		w, x, a, b, c := strings.Repeat("0", 39)+"9", strings.Repeat("1", 40), strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
		for i, p := range []struct {
			before, after, path string
			builds              int
		}{{x, a, "web/1", 1}, {a, b, "web/2", 1}, {a, c, "api/1", 1}} {
			if st, r, raw := postPush(e, "src", "github", fmt.Sprintf("d%d", i), pushOf(p.before, p.after, 0, p.path)); st != 200 || len(r.Builds) != p.builds {
				t.Fatalf("push %d: %d %s", i, st, raw)
			}
		}
		// W → X, late: C's api build and B's web build hold it.
		st, r, raw := postPush(e, "src", "github", "late", pushOf(w, x, 0, "api/0", "web/0"))
		if st != 200 || len(r.Builds) != 0 || !strings.Contains(r.Status, "api (merge 3, ccccccc)") || !strings.Contains(r.Status, "web (merge 1, aaaaaaa)") {
			t.Fatalf("the late push W → X: %d %s", st, raw)
		}
		// C → A: the branch forced back onto A, from C: built.
		if st, r, raw := postPush(e, "src", "github", "back", pushOf(c, a, 0, "api/1")); st != 200 || !strings.Contains(r.Status, "duplicate") {
			t.Fatalf("C → A (A merged already): %d %s", st, raw)
		}
		d := strings.Repeat("d", 40)
		if st, r, raw := postPush(e, "src", "github", "forced", pushOf(c, d, 0, "api/2")); st != 200 || len(r.Builds) != 1 {
			t.Fatalf("C → D: %d %s", st, raw)
		}
	})
}

// TestWebhooks_AForcePushBackOntoTheSecondMergeOfOneCommit: A → B, then
// A → C (the branch forced back to A in between, that push not yet
// delivered); a force-push from C back to A, made onto C, is a new state:
// only the first merge onto A was followed, and it was held as older.
func TestWebhooks_AForcePushBackOntoTheSecondMergeOfOneCommit(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet"})
		a, b, c := strings.Repeat("a", 40), strings.Repeat("b", 40), strings.Repeat("c", 40)
		for i, p := range [][2]string{{a, b}, {a, c}} {
			if st, r, raw := postPush(e, "src", "github", fmt.Sprintf("d%d", i), pushOf(p[0], p[1], 0, "web/x")); st != 200 || len(r.Builds) != 1 {
				t.Fatalf("push %d: %d %s", i, st, raw)
			}
		}
		if st, r, raw := postPush(e, "src", "github", "d3", pushOf(c, a, 0, "web/y")); st != 200 || len(r.Builds) != 1 {
			t.Fatalf("a force-push from C back to A was not built: %d %s", st, raw)
		}
	})
}

// TestWebhooks_ALatePushBehindMoreMergesThanAreFollowed: behind 1,001
// merges, only the last touching web, a late push was followed 1,000 deep
// and built web as newer than the last's build, which held it. Past the
// bound it is held, saying what is not known.
func TestWebhooks_ALatePushBehindMoreMergesThanAreFollowed(t *testing.T) {
	each(t, func(t *testing.T, e *ctltest.Env) {
		fleetSource(e, "github", "octo-org/fleet", map[string]any{"name": "web", "repository": "octo-org/fleet", "source_paths": []string{"web/"}})
		c := func(i int) string { return fmt.Sprintf("c%039x", i) }
		for i := 0; i <= 1000; i++ {
			path := "docs/x"
			if i == 1000 {
				path = "web/x"
			}
			if st, _, raw := postPush(e, "src", "github", fmt.Sprintf("d%d", i), pushOf(c(i), c(i+1), 0, path)); st != 200 {
				t.Fatalf("push %d: %d %s", i, st, raw)
			}
		}
		st, r, raw := postPush(e, "src", "github", "late", pushOf(fmt.Sprintf("%040x", 0xfeed), c(0), 0, "web/y"))
		if st != 200 || len(r.Builds) != 0 || !strings.Contains(r.Status, "more than 1000 merges were made after it") {
			t.Fatalf("the late push behind 1,001 merges: %d %s", st, raw)
		}
	})
}

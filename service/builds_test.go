package service_test

import (
	"context"
	"crypto/ed25519"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"mesh/models"
	"mesh/service"
	"mesh/store"
	"mesh/store/storetest"
)

type keySigner struct{ priv ed25519.PrivateKey }

func (k keySigner) KeyID() string              { return "test" }
func (k keySigner) Sign(payload []byte) []byte { return ed25519.Sign(k.priv, payload) }

func newService(s *store.Store) *service.Service {
	_, priv, _ := ed25519.GenerateKey(nil)
	return &service.Service{Store: s, Signer: keySigner{priv}}
}

// claimedBuild queues one build of a module of kind by a push and lets
// the builder "ci" claim it.
func claimedBuild(t *testing.T, s *store.Store, kind string) *models.Claimed {
	t.Helper()
	ctx := context.Background()
	if err := s.CreateModule(ctx, "test", &models.Module{Name: "mod", Kind: kind, Repository: "o/r", SourcePaths: "[]", Tiers: "[]"}); err != nil {
		t.Fatal(err)
	}
	src := &models.Source{Name: "forge", Kind: models.ForgeGitea, Repository: "o/r", DefaultBranch: "main", Secret: strings.Repeat("s", 16)}
	if err := s.CreateSource(ctx, "test", src); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Deliver(ctx, src, "d1", "push", &models.Push{Ref: "refs/heads/main", Commit: "c1", Repository: "o/r", Paths: []string{"x"}}, ""); err != nil {
		t.Fatal(err)
	}
	c, err := s.ClaimBuild(ctx, "user:ci", time.Hour, true)
	if err != nil || c == nil {
		t.Fatalf("claim: %v %v", c, err)
	}
	return c
}

func auditActions(t *testing.T, s *store.Store) map[string]string {
	t.Helper()
	evs, err := s.AuditEvents(context.Background(), 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range evs {
		out[e.Action] = e.Detail
	}
	return out
}

// TestFinishBuild_HostBuildWithoutPlatform: a builder finishing a
// mesh-host build without os/arch is refused and nothing is committed —
// the build stays leased to it, no release exists — so it can send the
// build again corrected (it used to be left ready with no release, and a
// retry got 409).
func TestFinishBuild_HostBuildWithoutPlatform(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		svc := newService(s)
		c := claimedBuild(t, s, models.KindHost)
		if err := s.CreateJoinToken(ctx, "test", "hash", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Enroll(ctx, "hash", "m1", "linux", "amd64", "1.4.0", "1", "tok"); err != nil {
			t.Fatal(err)
		}
		bin, err := svc.PutArtifact(ctx, strings.NewReader("a mesh-host binary"))
		if err != nil {
			t.Fatal(err)
		}
		req := &service.FinishBuild{ID: c.ID, Manifest: `{"resources": []}`, Artifact: bin, Version: "1.5.0"}
		_, err = svc.FinishBuild(ctx, "user:ci", req)
		var inv *models.InvalidError
		if !errors.As(err, &inv) || inv.Field != "os" {
			t.Fatalf("finish without os/arch: %v", err)
		}
		b, err := s.Build(ctx, "mod", c.Number)
		if err != nil || b.State != models.BuildBuilding || b.LeaseOwner != "user:ci" {
			t.Fatalf("after the refusal the build is %+v (%v); want still building, leased to user:ci", b, err)
		}
		if rs, _ := s.Releases(ctx, 10, 0); len(rs) != 0 {
			t.Fatalf("a refused finish left a release: %+v", rs)
		}
		if _, ok := auditActions(t, s)["finish-build"]; ok {
			t.Fatal("a refused finish is on the record as finished")
		}
		req.OS, req.Arch = "linux", "amd64"
		// The schemas the binary decodes are required of a host build too,
		// and refused the same way: nothing committed, the build still the
		// builder's.
		for _, tc := range []struct{ schemas, words string }{
			{"", "schemas: required: the declaration schemas the host release decodes, like 1,2"},
			{"1,x", `schemas: "x" is not a schema number`},
			{"3,4", "schemas: 3,4 decodes none of the schemas this controller composes (1..2)"},
		} {
			req.Schemas = tc.schemas
			_, err = svc.FinishBuild(ctx, "user:ci", req)
			if !errors.As(err, &inv) || inv.Field != "schemas" || !strings.Contains(err.Error(), tc.words) {
				t.Fatalf("finish with schemas %q: %v; want %q", tc.schemas, err, tc.words)
			}
			if rs, _ := s.Releases(ctx, 10, 0); len(rs) != 0 {
				t.Fatalf("a finish refused for schemas %q left a release: %+v", tc.schemas, rs)
			}
		}
		req.Schemas = "2, 1"
		res, err := svc.FinishBuild(ctx, "user:ci", req)
		if err != nil || res.Build.State != models.BuildReady {
			t.Fatalf("the corrected finish: %+v %v", res, err)
		}
		if rs, _ := s.Releases(ctx, 10, 0); len(rs) != 1 || rs[0].Version != "1.5.0" || rs[0].OS != "linux" || rs[0].Schemas != "1,2" {
			t.Fatalf("the corrected finish made releases %+v", rs)
		}
	})
}

// TestFinishBuild_ManifestRefusedFailsBuild: a manifest that does not
// parse is the commit's own content; no retry can fix it. The build ends
// failed with the reason audited, and is never claimed again.
func TestFinishBuild_ManifestRefusedFailsBuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		svc := newService(s)
		c := claimedBuild(t, s, models.KindService)
		_, err := svc.FinishBuild(ctx, "user:ci", &service.FinishBuild{ID: c.ID, Manifest: `{"resources": [`})
		if !errors.Is(err, models.ErrInvalid) {
			t.Fatalf("a broken manifest: %v", err)
		}
		b, err := s.Build(ctx, "mod", c.Number)
		if err != nil || b.State != models.BuildFailed {
			t.Fatalf("the build is %+v (%v); want failed", b, err)
		}
		if d := auditActions(t, s)["fail-build"]; !strings.Contains(d, "manifest refused") {
			t.Fatalf("the failure's reason is not on the record: %q", d)
		}
		if again, err := s.ClaimBuild(ctx, "user:ci", time.Hour, true); err != nil || again != nil {
			t.Fatalf("a failed build was claimed again: %+v %v", again, err)
		}
		if _, err := svc.FinishBuild(ctx, "user:ci", &service.FinishBuild{ID: c.ID, Manifest: `{"resources": []}`}); !errors.Is(err, models.ErrConflict) {
			t.Fatalf("finishing a failed build: %v", err)
		}
	})
}

// TestUploadBuild_RefusedBeforeAnyWrite: upload refusals of each field,
// each naming its field, and nothing stored.
func TestUploadBuild_RefusedBeforeAnyWrite(t *testing.T) {
	for _, tc := range []struct {
		name  string
		req   service.UploadBuild
		field string
	}{
		{"NoManifest", service.UploadBuild{}, "manifest"},
		{"LongVersion", service.UploadBuild{Manifest: `{"resources": []}`, Version: strings.Repeat("v", 101)}, "version"},
		{"LongCommit", service.UploadBuild{Manifest: `{"resources": []}`, Commit: strings.Repeat("c", 201)}, "commit"},
		{"BadPlatform", service.UploadBuild{Manifest: `{"resources": []}`, OS: "Linux!", Arch: "amd64"}, "os"},
		{"DigestWithoutArtifact", service.UploadBuild{Manifest: `{"resources": []}`, Digest: "sha256:00"}, "digest"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var inv *models.InvalidError
			if err := tc.req.Validate(); !errors.As(err, &inv) || inv.Field != tc.field {
				t.Fatalf("%v, want a refusal of %s", err, tc.field)
			}
		})
	}
	t.Run("DigestMismatch", func(t *testing.T) {
		r := service.UploadBuild{Manifest: `{"resources": []}`, Artifact: &models.Blob{Digest: models.DigestOf([]byte("x")), Size: 1}, Digest: "sha256:00"}
		if err := r.Validate(); !errors.Is(err, models.ErrDigestMismatch) {
			t.Fatal(err)
		}
	})
}

// TestUploadBuild_NeverComposable: what can never be composed is refused
// at upload with its field path (a tree without an artifact in a build
// that has none used to be accepted, start a plan and leave every machine
// behind with a compose error).
func TestUploadBuild_NeverComposable(t *testing.T) {
	for _, tc := range []struct {
		name, manifest, field string
		artifact              *models.Blob
	}{
		{"TreeWithoutArtifact", `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t"}]}`, "manifest.resources[0].artifact", nil},
		{"AfterNamesNothing", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": "x", "after": ["nope"]}]}`, "manifest.resources[0].after", nil},
		{"MalformedCheck", `{"resources": [{"name": "s", "kind": "service", "command": ["/bin/s"], "check": {"tcp": "x", "http": "y"}}]}`, "", nil},
		{"BadPlaceholder", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/f", "content": "${machine.nmae}"}]}`, "manifest.resources[0].content", nil},
		{"BadPlaceholderSyntax", `{"resources": [{"name": "f", "kind": "file", "path": "/etc/${var.}", "content": "x"}]}`, "manifest.resources[0].path", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := service.UploadBuild{Manifest: tc.manifest, Artifact: tc.artifact}
			err := req.Validate()
			var inv *models.InvalidError
			if !errors.As(err, &inv) || (tc.field != "" && inv.Field != tc.field) {
				t.Fatalf("%v, want a refusal of %q", err, tc.field)
			}
		})
	}
	t.Run("TreeWithUploadedArtifact", func(t *testing.T) {
		req := service.UploadBuild{Manifest: `{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t"}]}`, Artifact: &models.Blob{Digest: models.DigestOf([]byte("tar")), Size: 3}}
		if err := req.Validate(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestYankBuild_Validate(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    service.YankBuild
		ok   bool
	}{
		{"OK", service.YankBuild{Module: "app", Number: 2, Reason: "leaks"}, true},
		{"ErrNoReason", service.YankBuild{Module: "app", Number: 2, Reason: " \t"}, false},
		{"ErrLongReason", service.YankBuild{Module: "app", Number: 2, Reason: strings.Repeat("x", service.MaxYankReason+1)}, false},
		{"ErrNumber", service.YankBuild{Module: "app", Reason: "leaks"}, false},
		{"ErrModule", service.YankBuild{Module: "App!", Number: 2, Reason: "leaks"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.r.Validate(); (err == nil) != tc.ok {
				t.Fatalf("Validate() = %v", err)
			}
		})
	}
}

// TestUploadBuild_ARetriedUploadMakesOneBuild: CI sends an upload again
// when its first answer was lost. The copy — alone, or racing the first —
// makes no second build and no second plan; it is answered with the build
// the first made. An upload that differs in anything (another version),
// or follows a yanked build, is a build of its own.
func TestUploadBuild_ARetriedUploadMakesOneBuild(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		svc := newService(s)
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "app", Kind: models.KindService, SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		art, err := svc.PutArtifact(ctx, strings.NewReader("not a tarball: no tree unpacks it"))
		if err != nil {
			t.Fatal(err)
		}
		upload := func(version string) *service.BuildResult {
			t.Helper()
			res, err := svc.UploadBuild(ctx, "user:ci", &service.UploadBuild{Module: "app", Version: version, Commit: "c1",
				Manifest: `{"resources": []}`, Digest: art.Digest, Artifact: art})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		plans := func() int {
			t.Helper()
			ps, err := s.Plans(ctx, 100, 0)
			if err != nil {
				t.Fatal(err)
			}
			return len(ps)
		}
		if r := upload("1.0.0"); r.Same || r.Build.Number != 1 {
			t.Fatalf("first upload: same %v, build %d", r.Same, r.Build.Number)
		}
		if r := upload("2.0.0"); r.Same || r.Build.Number != 2 || plans() != 1 {
			t.Fatalf("second build: same %v, build %d, %d plans", r.Same, r.Build.Number, plans())
		}
		var wg sync.WaitGroup
		got := make([]*service.BuildResult, 3)
		for i := range got {
			wg.Go(func() { got[i] = upload("2.0.0") })
		}
		wg.Wait()
		for i, r := range got {
			if !r.Same || r.Build.Number != 2 {
				t.Fatalf("copy %d of build 2's upload: same %v, build %d", i, r.Same, r.Build.Number)
			}
		}
		if n := plans(); n != 1 {
			t.Fatalf("%d plans after the copies, want 1", n)
		}
		if _, err := s.SetCurrent(ctx, "test", "app", 1, "build 2 is bad"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.YankBuild(ctx, "test", "app", 2, "corrupts data"); err != nil {
			t.Fatal(err)
		}
		// A retry after a yank would roll the yanked bytes out again under
		// a new number: refused, saying so.
		_, err = svc.UploadBuild(ctx, "user:ci", &service.UploadBuild{Module: "app", Version: "2.0.0", Commit: "c1",
			Manifest: `{"resources": []}`, Digest: art.Digest, Artifact: art})
		if !errors.Is(err, models.ErrConflict) || !strings.Contains(err.Error(), "build 2 of app holds this upload and was yanked (corrupts data)") {
			t.Fatalf("the upload of a yanked build again: %v", err)
		}
		// A build a merge queued since (not finished) does not hide the
		// newest finished one: the retry is still one.
		if err := s.CreateBuild(ctx, "test", "app", &models.Build{Version: "3.0.0", Commit: "c3", Manifest: `{"resources": []}`}, nil); err != nil {
			t.Fatal(err)
		}
		if r := upload("4.0.0"); r.Same || r.Build.Number != 4 {
			t.Fatalf("build 4: same %v, build %d", r.Same, r.Build.Number)
		}
		if err := s.DB().Exec("INSERT INTO builds (module_id, number, state, manifest, created_at) SELECT module_id, 5, ?, '', created_at FROM builds WHERE number = 4",
			models.BuildQueued).Error; err != nil {
			t.Fatal(err)
		}
		if r := upload("4.0.0"); !r.Same || r.Build.Number != 4 {
			t.Fatalf("the retry of build 4's upload after a merge queued build 5: same %v, build %d", r.Same, r.Build.Number)
		}
	})
}

// TestUploadBuild_AHostReleaseForAnotherPlatformIsNoRetry: the same
// mesh-host binary uploaded for another platform (or schemas) is that
// platform's release, not a retry of the first's.
func TestUploadBuild_AHostReleaseForAnotherPlatformIsNoRetry(t *testing.T) {
	storetest.Dialects(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		svc := newService(s)
		if err := s.CreateModule(ctx, "test", &models.Module{Name: "mesh-host", Kind: models.KindHost, SourcePaths: "[]", Tiers: "[]"}); err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"amd64", "arm64"} {
			if err := s.CreateJoinToken(ctx, "test", "hash-"+a, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Enroll(ctx, "hash-"+a, "m-"+a, "linux", a, "1.4.0", "1", "tok"); err != nil {
				t.Fatal(err)
			}
		}
		bin, err := svc.PutArtifact(ctx, strings.NewReader("#!/bin/sh\n# a mesh-host for any platform\n"))
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []string{"amd64", "arm64"} {
			res, err := svc.UploadBuild(ctx, "user:admin", &service.UploadBuild{Module: "mesh-host", Version: "1.5.0", Commit: "c1",
				Manifest: `{"resources": []}`, Digest: bin.Digest, Artifact: bin, OS: "linux", Arch: a, Schemas: "1,2"})
			if err != nil || res.Same {
				t.Fatalf("the %s release: %v (same %v)", a, err, res != nil && res.Same)
			}
			// The first began the version's rollout; the second joined it
			// (where it was refused, "another host rollout is running").
			if res.Rollout == nil || len(res.Rollout.Machines) != map[string]int{"amd64": 1, "arm64": 2}[a] {
				t.Fatalf("the %s release's rollout: %+v", a, res.Rollout)
			}
		}
		rs, _ := s.Releases(ctx, 10, 0)
		if len(rs) != 2 {
			t.Fatalf("%d releases, want amd64 and arm64", len(rs))
		}
	})
}

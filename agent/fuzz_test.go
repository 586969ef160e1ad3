package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	tarrules "mesh/archive"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/models"
	"mesh/models/merkletest"
)

// fuzzKey is the controller key the fuzzed host trusts; otherKey it does not.
var (
	fuzzKey  = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{1}, ed25519.SeedSize))
	otherKey = ed25519.NewKeyFromSeed(bytes.Repeat([]byte{2}, ed25519.SeedSize))
)

func fuzzTrust() []PublicKey {
	return []PublicKey{
		{KeyID: "k1", PublicKey: fuzzKey.Public().(ed25519.PublicKey)},
		{KeyID: "short", PublicKey: []byte{1, 2, 3}}, // a broken key in the trust root must verify nothing
	}
}

func envelopeOf(tb testing.TB, payload []byte, sigs ...models.Signature) []byte {
	tb.Helper()
	b, err := json.Marshal(models.Envelope{Payload: payload, Signatures: sigs})
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// seedDeclaration is a valid v1 payload for machine m1.
func seedDeclaration() []byte {
	content := "port=9000\n"
	d := models.DigestOf([]byte("tree"))
	b, _ := json.Marshal(models.DeclarationPayload{Schema: 1, Machine: "m1", Generation: 42,
		ComposedAt: time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC), ComposedBy: "ctl-7f3a",
		Host: &models.HostRelease{Version: "1.4.2", OS: "linux", Arch: "amd64", Digest: d, Size: 9, URL: models.BlobURL(d), KeyID: "k1", Signature: []byte{1}},
		Resources: []models.Resource{
			{ID: "n.runtime", Module: "n", Build: 17, Kind: "tree", Path: "/opt/n", Artifact: &models.Artifact{Digest: d, Size: 4, URL: models.BlobURL(d)}},
			{ID: "n.config", Module: "n", Build: 17, Kind: "file", Path: "/etc/n.conf", Content: &content, Mode: "0644"},
			{ID: "n.service", Module: "n", Build: 17, Kind: "service", Command: []string{"/opt/n/bin/run"}, Env: map[string]string{},
				After: []string{"n.runtime", "n.config"}, Check: &models.Check{TCP: "127.0.0.1:9000", Interval: "10s"}, OnRemove: "forget"},
		}})
	return b
}

// FuzzVerify feeds the host's envelope verifier arbitrary bodies, as a
// controller (or anything between) could send. An envelope it accepts
// really carries a signature by a trusted key over its exact payload,
// for this machine, in schema 1; anything else is a refusal.
func FuzzVerify(f *testing.F) {
	p := seedDeclaration()
	f.Add(envelopeOf(f, p, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, p)}))
	f.Add(envelopeOf(f, p, models.Signature{KeyID: "k1", Sig: ed25519.Sign(otherKey, p)}))
	f.Add(envelopeOf(f, p, models.Signature{KeyID: "k2", Sig: ed25519.Sign(fuzzKey, p)}))
	f.Add(envelopeOf(f, p, models.Signature{KeyID: "short", Sig: []byte{1}}, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, p)}))
	f.Add([]byte(`{"payload": "e30=", "signatures": []}`))
	f.Add([]byte(`{"payload": "e30=", "signatures": [{"key_id": "k1", "sig": "AA=="}], "x": 1}`))
	f.Add([]byte(`not json`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if v := verifiedOrRefused(t, body, "an envelope without a valid signature by a trusted key"); v != nil {
			roundTrip(t, v.decl)
		}
	})
}

// signedByTrusted checks body's signatures independently of verify: a
// single-signature envelope's over its payload, or a batch envelope's
// over its root, the payload's leaf leading to that root (recomputed by
// RFC 6962's recursive definition, not verify's loop).
func signedByTrusted(body []byte) bool {
	var env struct {
		models.Envelope
		Batch *models.BatchProof `json:"batch"`
	}
	if json.Unmarshal(body, &env) != nil {
		return false
	}
	trusted := func(sigs []models.Signature, msg []byte) bool {
		for _, s := range sigs {
			if s.KeyID == "k1" && ed25519.Verify(fuzzKey.Public().(ed25519.PublicKey), msg, s.Sig) {
				return true
			}
		}
		return false
	}
	if env.Batch == nil {
		return trusted(env.Signatures, env.Payload)
	}
	b := env.Batch
	if env.Signatures != nil || b.Size < 1 || b.Index < 0 || b.Index >= b.Size || len(b.Path) > 64 {
		return false
	}
	leaf := sha256.Sum256(append([]byte{0}, env.Payload...))
	root, rest, ok := merkletest.RootFrom(leaf[:], uint64(b.Index), uint64(b.Size), b.Path)
	return ok && len(rest) == 0 && bytes.Equal(root, b.Root) && trusted(b.Signatures, models.BatchStatement(b.Size, b.Root))
}

// batchOf seals payloads as the controller does a compose chunk, signed
// by key under id.
func batchOf(tb testing.TB, id string, key ed25519.PrivateKey, payloads ...[]byte) [][]byte {
	tb.Helper()
	envs, err := models.SealBatch(payloads, fuzzSigner{id, key})
	if err != nil {
		tb.Fatal(err)
	}
	return envs
}

type fuzzSigner struct {
	id  string
	key ed25519.PrivateKey
}

func (s fuzzSigner) KeyID() string        { return s.id }
func (s fuzzSigner) Sign(p []byte) []byte { return ed25519.Sign(s.key, p) }

// FuzzVerifyBatch feeds the verifier batch envelopes, seeded with real
// ones (trees of 1 to 13 leaves, this machine's payload at every place)
// for the fuzzer to mutate: an accepted one really has its payload's
// leaf in a tree whose root a trusted key signed; anything else is a
// refusal, and what is refused is never returned as verified.
func FuzzVerifyBatch(f *testing.F) {
	p := seedDeclaration()
	for _, size := range []int{1, 2, 3, 5, 8, 13} {
		for at := range size {
			ps := make([][]byte, size)
			for i := range ps {
				ps[i] = []byte(`{"schema":1,"machine":"other"}`)
			}
			ps[at] = p
			f.Add(batchOf(f, "k1", fuzzKey, ps...)[at])
		}
	}
	f.Add(batchOf(f, "k1", otherKey, p)[0])
	f.Add(batchOf(f, "k2", fuzzKey, p, p)[1])
	f.Add([]byte(`{"payload":"e30=","batch":{"size":1,"index":0,"path":[],"root":"AA==","signatures":[]}}`))
	f.Add([]byte(`{"payload":"e30=","signatures":[],"batch":{"size":1,"index":0,"path":[],"root":"AA==","signatures":[]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		verifiedOrRefused(t, body, "an envelope whose payload is not in a tree signed by a trusted key")
	})
}

// verifiedOrRefused runs the host's verifier on body for machine m1: a
// refusal must be one, and return nothing unverified; an acceptance must
// be of a body signedByTrusted (else it accepted forged, naming what),
// for m1, in schema 1, with the payload's digest. It returns what was
// accepted (nil: refused).
func verifiedOrRefused(t *testing.T, body []byte, forged string) *verified {
	t.Helper()
	v, err := verify(body, fuzzTrust(), "m1")
	if err != nil {
		var r *refusal
		if !errors.As(err, &r) {
			t.Fatalf("error %v is not a refusal", err)
		}
		if v != nil && !signedByTrusted(body) {
			t.Fatalf("refused for %q, but returned what was never verified", r.reason)
		}
		return nil
	}
	if !signedByTrusted(body) {
		t.Fatal("accepted " + forged)
	}
	if v.digest != models.DigestOf(v.payload) || v.decl.Machine != "m1" || v.decl.Schema != models.SchemaV1 {
		t.Fatalf("accepted %+v (digest %s)", v.decl, v.digest)
	}
	return v
}

// roundTrip re-signs what the host decoded and decodes it again: the same
// declaration must come back, marshalled to the same bytes.
func roundTrip(t *testing.T, d models.DeclarationPayload) {
	t.Helper()
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatalf("marshal what was decoded: %v", err)
	}
	v, err := verify(envelopeOf(t, b, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, b)}), fuzzTrust(), d.Machine)
	if err != nil {
		t.Fatalf("its own re-encoding refused: %v\n%s", err, b)
	}
	again, _ := json.Marshal(v.decl)
	if !bytes.Equal(again, b) {
		t.Fatalf("round trip changed the declaration:\n%s\n%s", b, again)
	}
}

// FuzzDeclarationDecode signs arbitrary payloads, so the fuzzer reaches the
// strict decoder and the resource checks behind the signature. Signed by
// the trusted key a payload is never refused as unverified; signed by
// another it always is. What checkResources lets through can be ordered.
func FuzzDeclarationDecode(f *testing.F) {
	f.Add(seedDeclaration(), uint8(0))
	f.Add(seedDeclaration(), uint8(1))
	f.Add([]byte(`{"schema":1,"machine":"m1","generation":1,"composed_at":"2026-01-01T00:00:00Z","composed_by":"c","empty_ok":true,"host":null,"resources":[]}`), uint8(0))
	f.Add([]byte(`{"schema":2,"machine":"m1"}`), uint8(0))
	f.Add([]byte(`{"schema":1,"machine":"m2"}`), uint8(0))
	f.Add([]byte(`{"schema":1,"machine":"m1","resources":[{"id":"a","kind":"file","content":"","path":"/a","after":["b"]},{"id":"b","kind":"file","content":"","path":"/b","after":["a"]}]}`), uint8(0))
	f.Add([]byte(`{"schema":1,"machine":"m1","resources":[{"id":"a","kind":"tree","path":"/x/../etc","artifact":{"digest":"sha256:00"}}]}`), uint8(0))
	f.Add([]byte(`{"schema":1,"machine":"m1"} {}`), uint8(0))
	f.Add([]byte(`{"schema":1,"machine":"m1","unknown":true}`), uint8(0))
	f.Fuzz(func(t *testing.T, payload []byte, how uint8) {
		key, id := fuzzKey, "k1"
		switch how % 3 {
		case 1:
			key = otherKey
		case 2:
			id = "k2"
		}
		v, err := verify(envelopeOf(t, payload, models.Signature{KeyID: id, Sig: ed25519.Sign(key, payload)}), fuzzTrust(), "m1")
		unverified := err != nil && strings.HasPrefix(err.Error(), "not verified")
		if (how%3 == 0) == unverified {
			t.Fatalf("signed by the trusted key: %v; refused as unverified: %v", how%3 == 0, err)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(v.payload, payload) || v.digest != models.DigestOf(payload) {
			t.Fatal("verified bytes are not the payload's")
		}
		roundTrip(t, v.decl)
		if err := checkResources(&v.decl, []string{"/opt", "/etc"}); err != nil {
			var r *refusal
			if !errors.As(err, &r) {
				t.Fatalf("checkResources: %v is not a refusal", err)
			}
			return
		}
		ordered, err := order(v.decl.Resources)
		if err != nil || len(ordered) != len(v.decl.Resources) {
			t.Fatalf("checked resources could not be ordered: %v (%d of %d)", err, len(ordered), len(v.decl.Resources))
		}
		at := map[string]int{}
		for i, r := range ordered {
			at[r.ID] = i
		}
		for i, r := range ordered {
			if r.Kind != "service" && !strings.HasPrefix(r.Path, "/opt/") && !strings.HasPrefix(r.Path, "/etc/") && r.Path != "/opt" && r.Path != "/etc" {
				t.Fatalf("%s: path %q outside the allowed roots passed", r.ID, r.Path)
			}
			for _, a := range r.After {
				if at[a] >= i {
					t.Fatalf("%s is ordered before %s, which it comes after", r.ID, a)
				}
			}
		}
	})
}

// FuzzManifestAcceptedByHost: a manifest the controller accepts, composed
// for a machine whose variables are set (var.A to anything), is a
// declaration every host accepts. Otherwise a build is taken that no machine can ever apply.
func FuzzManifestAcceptedByHost(f *testing.F) {
	for _, s := range []string{
		`{"resources": [{"name": "runtime", "kind": "tree", "path": "/opt/node-tools"},
		 {"name": "config", "kind": "file", "path": "/etc/node-tools.conf", "content": "port=${var.PORT}\n", "mode": "0644"},
		 {"name": "service", "kind": "service", "command": ["/opt/node-tools/bin/run", "${machine.name}"], "after": ["runtime", "config"],
		  "check": {"tcp": "127.0.0.1:9000"}}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/opt/t/"}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/opt//t"}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/"}]}`,
		`{"resources": [{"name": "s", "kind": "service", "command": ["run"]}]}`,
		`{"resources": [{"name": "a", "kind": "tree", "path": "/a", "after": ["b"]}, {"name": "b", "kind": "tree", "path": "/b", "after": ["a"]}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/t", "artifact": {"digest": "sha256:00"}}]}`,
		`{"resources": [{"name": "t", "kind": "tree", "path": "/opt/${var.PORT}"}]}`,
		`{"resources": [{"name": "s", "kind": "service", "command": ["${var.A}"]}]}`,
	} {
		f.Add([]byte(s), "9000")
	}
	f.Add([]byte(`{"resources": [{"name": "t", "kind": "tree", "path": "/opt/${var.A}"}]}`), "../etc")
	f.Add([]byte(`{"resources": [{"name": "s", "kind": "service", "command": ["${var.A}"]}]}`), "bin/run")
	f.Fuzz(func(t *testing.T, b []byte, val string) {
		m, err := models.ParseManifest(b)
		if err != nil {
			return
		}
		p, err := models.ComposePayload(models.ComposeInput{Machine: "m1", Generation: 1, ComposedBy: "c",
			Variables: map[string]string{"PORT": "9000", "A": val},
			Modules:   []models.ComposeModule{{Name: "mod", Build: 1, Digest: models.DigestOf(b), Parsed: m}}})
		if err != nil {
			return
		}
		pb, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		v, err := verify(envelopeOf(t, pb, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, pb)}), fuzzTrust(), "m1")
		if err != nil {
			t.Fatalf("the host refuses what the controller composed: %v\n%s", err, pb)
		}
		if err := checkResources(&v.decl, []string{"/"}); err != nil {
			t.Fatalf("the host refuses what the controller accepted: %v\nmanifest %s", err, b)
		}
	})
}

// FuzzUnpack unpacks arbitrary tar streams (gzipped here, so the fuzzer
// works on the tar layer) into a tree inside a machine root beside files
// that must not be touched. Whatever the archive, nothing outside the
// tree changes; an archive that is taken leaves no symlink leading out.
func FuzzUnpack(f *testing.F) {
	for _, es := range [][]tarEntry{
		{{name: "bin/run", body: "#!/bin/sh\n"}, {name: "bin/", typ: tar.TypeDir}, {name: "lib/link", link: "../bin/run", typ: tar.TypeSymlink}},
		{{name: "a", body: "x"}, {name: "b", link: "a", typ: tar.TypeLink}},
		{{name: "../escape", body: "x"}},
		{{name: "/abs", body: "x"}},
		{{name: "out", link: "../../outside", typ: tar.TypeSymlink}, {name: "out/secret", body: "x"}},
		{{name: "out", link: "/etc", typ: tar.TypeSymlink}},
		{{name: "h", link: "../victim", typ: tar.TypeLink}},
		{{name: "dev", typ: tar.TypeChar}},
		{{name: "d/", typ: tar.TypeDir}, {name: "d/up", link: "..", typ: tar.TypeSymlink}, {name: "d/up2", link: "up/..", typ: tar.TypeSymlink}},
		{{name: "x", link: "d/up/..", typ: tar.TypeSymlink}, {name: "d/", typ: tar.TypeDir}, {name: "d/up", link: "..", typ: tar.TypeSymlink}},
		{{name: "a/b/c", body: "deep"}, {name: "a/b/c", body: "again"}},
		{{name: "./.", typ: tar.TypeDir}, {name: "x/./y/../z", body: "z"}},
	} {
		f.Add(ungzip(f, makeTar(f, es...)))
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, tarBytes []byte) {
		base := t.TempDir()
		rootDir := filepath.Join(base, "root")
		must(t, os.MkdirAll(filepath.Join(rootDir, "opt", "tree"), 0o755))
		must(t, os.MkdirAll(filepath.Join(base, "outside"), 0o755))
		must(t, os.WriteFile(filepath.Join(base, "outside", "secret"), []byte("secret"), 0o600))
		must(t, os.WriteFile(filepath.Join(rootDir, "victim"), []byte("victim"), 0o644))
		before := snapshotOutside(t, base)

		var gz bytes.Buffer
		zw := gzip.NewWriter(&gz)
		_, _ = zw.Write(tarBytes)
		must(t, zw.Close())
		archive := filepath.Join(base, "a.tar.gz")
		must(t, os.WriteFile(archive, gz.Bytes(), 0o600))
		before[archive] = "file"

		m, err := openMachineRoot(rootDir)
		must(t, err)
		defer m.root.Close()
		n, err := m.unpack("opt/tree", archive, DefaultUnpackLimits())
		if err != nil && n < 0 {
			t.Fatalf("negative count %d", n)
		}
		after := snapshotOutside(t, base)
		after[archive] = "file"
		for p, s := range after {
			if before[p] != s {
				t.Fatalf("outside the tree %s changed: %q → %q", p, before[p], s)
			}
		}
		for p := range before {
			if _, ok := after[p]; !ok {
				t.Fatalf("outside the tree %s disappeared", p)
			}
		}
		if err != nil {
			return
		}
		// A host unpacked it: the upload's judge, which refuses a build
		// whose tree no host would unpack, must not refuse it.
		if jerr := tarrules.Judge(bytes.NewReader(gz.Bytes()), int64(gz.Len()), DefaultUnpackLimits()); jerr != nil {
			t.Fatalf("the upload's judge refuses an archive a host unpacks: %v", jerr)
		}
		tree := filepath.Join(rootDir, "opt", "tree")
		_ = filepath.WalkDir(tree, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.Type()&fs.ModeSymlink == 0 {
				return nil
			}
			r, _ := filepath.Rel(tree, p)
			link, _ := os.Readlink(p)
			parent := strings.Split(filepath.ToSlash(filepath.Dir(r)), "/")
			if _, escaped := resolveIn(tree, parent, link, new(int)); escaped {
				t.Fatalf("the archive was taken with symlink %s → %s, which leads out of the tree", r, link)
			}
			return nil
		})
	})
}

// resolveIn follows target from the directory cur (components under top)
// through the tree's symlinks as the kernel would, and reports whether it
// ever steps above top. What does not exist is taken lexically.
func resolveIn(top string, cur []string, target string, hops *int) ([]string, bool) {
	if *hops++; *hops > 40 {
		return cur, false // a loop: the kernel says ELOOP, nothing escapes
	}
	if path.IsAbs(target) {
		return nil, true
	}
	out := []string{}
	for _, c := range cur {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	for _, c := range strings.Split(target, "/") {
		switch c {
		case "", ".":
			continue
		case "..":
			if len(out) == 0 {
				return nil, true
			}
			out = out[:len(out)-1]
			continue
		}
		out = append(out, c)
		full := filepath.Join(append([]string{top}, out...)...)
		fi, err := os.Lstat(full)
		if err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			continue
		}
		link, err := os.Readlink(full)
		if err != nil {
			return nil, true
		}
		var escaped bool
		if out, escaped = resolveIn(top, out[:len(out)-1], link, hops); escaped {
			return nil, true
		}
	}
	return out, false
}

// snapshotOutside describes every path under base that is not the tree:
// kind, content, mode and link count, so a write, a chmod or a hardlink
// through an escape shows.
func snapshotOutside(t *testing.T, base string) map[string]string {
	t.Helper()
	tree := filepath.Join(base, "root", "opt", "tree")
	out := map[string]string{}
	must(t, filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == tree {
			return fs.SkipDir
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		s := fi.Mode().String()
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			s += " nlink " + string(rune('0'+st.Nlink%10))
		}
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			s += " " + string(b)
		}
		out[p] = s
		return nil
	}))
	return out
}

func ungzip(tb testing.TB, b []byte) []byte {
	tb.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		tb.Fatal(err)
	}
	out, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

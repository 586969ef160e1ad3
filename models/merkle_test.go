package models

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"mesh/models/merkletest"
)

// The RFC 6962 reference tree (the Certificate Transparency test data):
// eight leaves and the root of each prefix of them.
var (
	ctLeaves = []string{"", "00", "10", "2021", "3031", "40414243", "5051525354555657", "606162636465666768696a6b6c6d6e6f"}
	ctRoots  = []string{
		"6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
		"fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
		"aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
		"d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
		"4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
		"76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
		"ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
		"5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
	}
)

func unhex(t *testing.T, s string) []byte {
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestMerkleTree_RFC6962Roots: the tree is RFC 6962's, so any CT library
// computes the root a host checks.
func TestMerkleTree_RFC6962Roots(t *testing.T) {
	var leaves [][32]byte
	for n, l := range ctLeaves {
		leaves = append(leaves, MerkleLeaf(unhex(t, l)))
		root, _ := MerkleTree(leaves)
		if got := hex.EncodeToString(root[:]); got != ctRoots[n] {
			t.Errorf("size %d: root %s, RFC 6962 says %s", n+1, got, ctRoots[n])
		}
	}
	_, paths := MerkleTree(leaves)
	want := []string{"96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
		"5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
		"6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4"}
	if len(paths[0]) != len(want) {
		t.Fatalf("leaf 0 of 8: a path of %d hashes", len(paths[0]))
	}
	for i, w := range want {
		if got := hex.EncodeToString(paths[0][i]); got != w {
			t.Errorf("leaf 0 of 8, path[%d] = %s, want %s", i, got, w)
		}
	}
}

// TestVerifyInclusion: in trees of 1 to 17 leaves every leaf's proof
// verifies, and any change to the leaf, the index, the size, the path or
// the root is refused.
func TestVerifyInclusion(t *testing.T) {
	for size := 1; size <= 17; size++ {
		leaves := make([][32]byte, size)
		for i := range leaves {
			leaves[i] = MerkleLeaf([]byte(fmt.Sprintf(`{"machine":"m%d"}`, i)))
		}
		root, paths := MerkleTree(leaves)
		for i := range leaves {
			n, idx := int64(size), int64(i)
			if err := VerifyInclusion(leaves[i], idx, n, paths[i], root[:]); err != nil {
				t.Fatalf("size %d leaf %d: %v", size, i, err)
			}
			other := MerkleLeaf([]byte(fmt.Sprintf(`{"machine":"m%d "}`, i)))
			flipped := func(b []byte) []byte { c := append([]byte(nil), b...); c[0] ^= 1; return c }
			cases := []inclusionCase{
				{"another payload", other, idx, n, paths[i], root[:]},
				{"a node for a leaf", merkleNode(leaves[i][:], leaves[i][:]), idx, n, paths[i], root[:]},
				{"the next index", leaves[i], idx + 1, n, paths[i], root[:]},
				{"a negative index", leaves[i], -1, n, paths[i], root[:]},
				{"index = size", leaves[i], n, n, paths[i], root[:]},
				{"a size of 0", leaves[i], idx, 0, paths[i], root[:]},
				{"a larger tree", leaves[i], idx, 2*n + 1, paths[i], root[:]},
				{"another root", leaves[i], idx, n, paths[i], flipped(root[:])},
				{"a short root", leaves[i], idx, n, paths[i], root[:31]},
				{"a hash too many", leaves[i], idx, n, append(append([][]byte{}, paths[i]...), root[:]), root[:]},
			}
			if len(paths[i]) > 0 {
				p := append([][]byte{}, paths[i]...)
				p[len(p)-1] = flipped(p[len(p)-1])
				cases = append(cases, inclusionCase{"a changed path", leaves[i], idx, n, p, root[:]},
					inclusionCase{"a hash too few", leaves[i], idx, n, paths[i][:len(paths[i])-1], root[:]},
					inclusionCase{"a short path hash", leaves[i], idx, n, append([][]byte{paths[i][0][:31]}, paths[i][1:]...), root[:]})
			}
			for _, c := range cases {
				if c.index == idx && c.size == n && c.leaf == leaves[i] && len(c.path) == len(paths[i]) && string(c.root) == string(root[:]) && c.name != "a changed path" && c.name != "a short path hash" {
					t.Fatalf("case %q changes nothing", c.name)
				}
				err := VerifyInclusion(c.leaf, c.index, c.size, c.path, c.root)
				if !errors.Is(err, ErrInclusion) {
					t.Errorf("size %d leaf %d, %s: %v, want a refusal", size, i, c.name, err)
				}
			}
		}
	}
}

type inclusionCase struct {
	name  string
	leaf  [32]byte
	index int64
	size  int64
	path  [][]byte
	root  []byte
}

func TestVerifyInclusion_BoundedPath(t *testing.T) {
	leaf := MerkleLeaf(nil)
	path := make([][]byte, MaxProofLen+1)
	for i := range path {
		path[i] = make([]byte, 32)
	}
	if err := VerifyInclusion(leaf, 0, 1<<62, path, make([]byte, 32)); err == nil || !strings.Contains(err.Error(), "at most 64") {
		t.Fatalf("a path of 65 hashes: %v", err)
	}
}

type testSigner struct {
	id   string
	priv ed25519.PrivateKey
}

func (s testSigner) KeyID() string              { return s.id }
func (s testSigner) Sign(payload []byte) []byte { return ed25519.Sign(s.priv, payload) }

// TestSealBatch_OpenEnvelope: every envelope of a sealed batch opens to its
// own payload with the trusted key, and a single-signature envelope opens
// too; tampering with either is refused.
func TestSealBatch_OpenEnvelope(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	signer := testSigner{"k1", priv}
	trusted := func(id string, msg, sig []byte) bool {
		return id == "k1" && ed25519.Verify(priv.Public().(ed25519.PublicKey), msg, sig)
	}
	for size := 1; size <= 17; size++ {
		var payloads [][]byte
		for i := range size {
			payloads = append(payloads, []byte(fmt.Sprintf(`{"schema":1,"machine":"m%d"}`, i)))
		}
		envs, err := SealBatch(payloads, signer)
		if err != nil {
			t.Fatal(err)
		}
		for i, env := range envs {
			got, err := OpenEnvelope(env, trusted)
			if err != nil || string(got) != string(payloads[i]) {
				t.Fatalf("size %d envelope %d: %q, %v", size, i, got, err)
			}
			var be BatchEnvelope
			if err := json.Unmarshal(env, &be); err != nil {
				t.Fatal(err)
			}
			if be.Batch.Path == nil || be.Batch.Size != int64(size) || be.Batch.Index != int64(i) {
				t.Fatalf("size %d envelope %d: %+v", size, i, be.Batch)
			}
			tampered := map[string]func(e *BatchEnvelope){
				"payload":   func(e *BatchEnvelope) { e.Payload = append(e.Payload, ' ') },
				"index":     func(e *BatchEnvelope) { e.Batch.Index = (e.Batch.Index + 1) % e.Batch.Size },
				"size":      func(e *BatchEnvelope) { e.Batch.Size++ },
				"root":      func(e *BatchEnvelope) { h := MerkleLeaf(e.Batch.Root); e.Batch.Root = h[:] },
				"signature": func(e *BatchEnvelope) { e.Batch.Signatures[0].Sig = ed25519.Sign(priv, e.Payload) },
				"key":       func(e *BatchEnvelope) { e.Batch.Signatures[0].KeyID = "k2" },
				"path": func(e *BatchEnvelope) {
					if len(e.Batch.Path) == 0 {
						e.Batch.Path = [][]byte{make([]byte, 32)}
					} else {
						h := MerkleLeaf(e.Batch.Path[0])
						e.Batch.Path[0] = h[:]
					}
				},
			}
			for name, change := range tampered {
				if name == "index" && size == 1 {
					continue // one leaf has one index
				}
				var e BatchEnvelope
				_ = json.Unmarshal(env, &e)
				change(&e)
				b, _ := json.Marshal(e)
				if _, err := OpenEnvelope(b, trusted); err == nil {
					t.Errorf("size %d envelope %d: a changed %s verified", size, i, name)
				}
			}
		}
	}
	one, err := SealOne([]byte(`{"schema":1}`), signer)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := OpenEnvelope(one, trusted); err != nil || string(got) != `{"schema":1}` {
		t.Fatalf("single-signature envelope: %q, %v", got, err)
	}
	// Both kinds at once, unknown fields, trailing data: refused.
	envs, _ := SealBatch([][]byte{[]byte(`{"schema":1}`)}, signer)
	both := strings.Replace(string(envs[0]), `"batch"`, `"signatures":[{"key_id":"k1","sig":"`+
		b64(ed25519.Sign(priv, []byte(`{"schema":1}`)))+`"}],"batch"`, 1)
	for name, body := range map[string]string{
		"both":     both,
		"unknown":  strings.Replace(string(envs[0]), `"batch"`, `"x":1,"batch"`, 1),
		"trailing": string(envs[0]) + `{}`,
		"null":     `null`,
	} {
		if _, err := OpenEnvelope([]byte(body), trusted); err == nil {
			t.Errorf("%s: verified", name)
		}
	}
}

func b64(b []byte) string {
	s, _ := json.Marshal(b)
	return strings.Trim(string(s), `"`)
}

func TestAcceptsBatch(t *testing.T) {
	for h, want := range map[string]bool{"": false, "batch": true, " batch ": true, "single, batch": true,
		"batchy": false, "Batch": false, "x,batch,y": true, ",": false} {
		if got := AcceptsBatch(h); got != want {
			t.Errorf("AcceptsBatch(%q) = %v", h, got)
		}
	}
}

// benchPayloads are n payloads the size of a small service's declaration.
func benchPayloads(n int) [][]byte {
	ps := make([][]byte, n)
	for i := range ps {
		ps[i] = []byte(fmt.Sprintf(`{"schema":1,"machine":"m%05d","resources":[%s]}`, i, strings.Repeat(`{"id":"mod.config","kind":"file","content":"port=9000"},`, 24)+`{}`))
	}
	return ps
}

// BenchmarkSeal_Batch500 and BenchmarkSeal_One500: sealing a compose
// chunk of 500 payloads as one batch, and one signature each as before
// batches (ns/op is per chunk; per machine is /500).
func BenchmarkSeal_Batch500(b *testing.B) {
	ps := benchPayloads(500)
	sg := testSigner{"k1", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	defer cpuPerMachine(b, len(ps))()
	for b.Loop() {
		if _, err := SealBatch(ps, sg); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuPerMachine reports the process's CPU per machine sealed (a shared
// machine's wall clock says more about the neighbours than about sealing).
func cpuPerMachine(b *testing.B, machines int) func() {
	cpu := func() time.Duration {
		var ru syscall.Rusage
		_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Microseconds())/float64(b.N*machines), "cpu-µs/machine")
	}
}

func BenchmarkSeal_One500(b *testing.B) {
	ps := benchPayloads(500)
	sg := testSigner{"k1", ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	defer cpuPerMachine(b, len(ps))()
	for b.Loop() {
		for _, p := range ps {
			if _, err := SealOne(p, sg); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkOpenEnvelope: the host's check of a batch envelope from
// a chunk of 500 (9 path hashes) against a single-signature one.
func BenchmarkOpenEnvelope(b *testing.B) {
	ps := benchPayloads(500)
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	sg := testSigner{"k1", priv}
	envs, _ := SealBatch(ps, sg)
	one, _ := SealOne(ps[0], sg)
	valid := func(_ string, msg, sig []byte) bool {
		return ed25519.Verify(priv.Public().(ed25519.PublicKey), msg, sig)
	}
	for name, env := range map[string][]byte{"batch": envs[0], "single": one} {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, err := OpenEnvelope(env, valid); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// FuzzVerifyInclusion: proofs from real trees, then moved (another index,
// another size, a bit flipped, hashes cut or added): VerifyInclusion
// accepts exactly what the recursive definition does.
func FuzzVerifyInclusion(f *testing.F) {
	f.Add(uint16(7), uint16(3), int8(0), int8(0), uint16(0), uint8(0), false)
	f.Add(uint16(2), uint16(0), int8(1), int8(0), uint16(0), uint8(0), false)
	f.Add(uint16(4), uint16(0), int8(-1), int8(0), uint16(0), uint8(0), false)
	f.Add(uint16(16), uint16(15), int8(0), int8(-1), uint16(9), uint8(1), true)
	f.Add(uint16(499), uint16(256), int8(0), int8(0), uint16(300), uint8(2), false)
	f.Fuzz(func(t *testing.T, n, m uint16, dSize, dIndex int8, flip uint16, cut uint8, extend bool) {
		size := int(n%600) + 1
		leaves := make([][32]byte, size)
		for i := range leaves {
			leaves[i] = MerkleLeaf([]byte{byte(i), byte(i >> 8)})
		}
		root, paths := MerkleTree(leaves)
		at := int(m) % size
		path := append([][]byte{}, paths[at]...)
		if flip != 0 && len(path) > 0 {
			i := int(flip) % len(path)
			p := append([]byte(nil), path[i]...)
			p[int(flip>>4)%32] ^= byte(flip>>8) | 1
			path[i] = p
		}
		path = path[:len(path)-min(int(cut)%4, len(path))]
		if extend {
			path = append(path, root[:])
		}
		index, treeSize := int64(at)+int64(dIndex), int64(size)+int64(dSize)
		err := VerifyInclusion(leaves[at], index, treeSize, path, root[:])
		want := false
		if treeSize >= 1 && index >= 0 && index < treeSize && len(path) <= MaxProofLen {
			got, rest, ok := merkletest.RootFrom(leaves[at][:], uint64(index), uint64(treeSize), path)
			want = ok && len(rest) == 0 && bytes.Equal(got, root[:])
		}
		if (err == nil) != want {
			t.Fatalf("leaf %d of %d as %d of %d, path of %d: VerifyInclusion says %v, the definition %v", at, size, index, treeSize, len(path), err, want)
		}
		// Within the signed size a leaf has one place. (Another size may
		// take the same path to the same root — leaf 1 of 2 is leaf 16 of
		// 17 when the first 16 hash to that root — which is why the size
		// is in the signed statement.)
		if err == nil && treeSize == int64(size) && index != int64(at) {
			t.Fatalf("leaf %d of %d verified as leaf %d", at, size, index)
		}
	})
}

// TestSealOne_TodaysBytes: the single-signature envelope is byte for byte
// what hosts before batch envelopes verify (the wire contract's shape).
func TestSealOne_TodaysBytes(t *testing.T) {
	priv := ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))
	payload := []byte(`{"schema":1,"machine":"m1"}`)
	got, err := SealOne(payload, testSigner{"k1", priv})
	if err != nil {
		t.Fatal(err)
	}
	want := `{"payload":"` + b64(payload) + `","signatures":[{"key_id":"k1","sig":"` + b64(ed25519.Sign(priv, payload)) + `"}]}`
	if string(got) != want {
		t.Fatalf("single-signature envelope\n%s\nwant\n%s", got, want)
	}
}

// TestSealBatch_AsMarshalled: the envelopes SealBatch writes directly are
// byte for byte what json.Marshal makes of the same BatchEnvelope, for
// trees of every shape up to 33 leaves, payloads empty, absent and
// binary, and a key id JSON must escape.
func TestSealBatch_AsMarshalled(t *testing.T) {
	signer := testSigner{`k<&>"1`, ed25519.NewKeyFromSeed(make([]byte, ed25519.SeedSize))}
	for size := 1; size <= 33; size++ {
		payloads := make([][]byte, size)
		for i := range payloads {
			switch i % 4 {
			case 0:
				payloads[i] = []byte(fmt.Sprintf(`{"schema":1,"machine":"m%d","note":"é<&>"}`, i))
			case 1:
				payloads[i] = []byte{}
			case 2:
				payloads[i] = nil
			case 3:
				payloads[i] = []byte{0, 0xff, byte(i), '"', '\\'}
			}
		}
		envs, err := SealBatch(payloads, signer)
		if err != nil {
			t.Fatal(err)
		}
		leaves := make([][32]byte, size)
		for i, p := range payloads {
			leaves[i] = MerkleLeaf(p)
		}
		root, paths := MerkleTree(leaves)
		sigs := []Signature{{KeyID: signer.KeyID(), Sig: signer.Sign(BatchStatement(int64(size), root[:]))}}
		for i, p := range payloads {
			path := paths[i]
			if path == nil {
				path = [][]byte{}
			}
			want, err := json.Marshal(BatchEnvelope{Payload: p, Batch: BatchProof{Size: int64(size), Index: int64(i),
				Path: path, Root: root[:], Signatures: sigs}})
			if err != nil {
				t.Fatal(err)
			}
			if string(envs[i]) != string(want) {
				t.Fatalf("size %d envelope %d:\n got %s\nwant %s", size, i, envs[i], want)
			}
		}
	}
}

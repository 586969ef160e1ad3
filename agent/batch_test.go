package agent

import (
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"

	"mesh/models"
)

// TestVerify_BatchEnvelope: the host verifies a batch envelope at every
// place of trees of 1 to 17 payloads, and still today's single-signature
// one; a batch envelope moved to another payload, index or root, or
// signed by a key it does not trust, is refused as not verified.
func TestVerify_BatchEnvelope(t *testing.T) {
	p := seedDeclaration()
	for size := 1; size <= 17; size++ {
		for at := range size {
			ps := make([][]byte, size)
			for i := range ps {
				ps[i] = []byte(`{"schema":1,"machine":"other"}`)
			}
			ps[at] = p
			envs := batchOf(t, "k1", fuzzKey, ps...)
			v, err := verify(envs[at], fuzzTrust(), "m1")
			if err != nil || string(v.payload) != string(p) || v.digest != models.DigestOf(p) {
				t.Fatalf("size %d at %d: %v", size, at, err)
			}
			if !signedByTrusted(envs[at]) {
				t.Fatalf("size %d at %d: the fuzz targets' independent check disagrees", size, at)
			}
			if size > 1 {
				// Another machine's envelope of the same batch: verified,
				// then refused as another machine's.
				other := envs[(at+1)%size]
				if _, err := verify(other, fuzzTrust(), "m1"); err == nil || !strings.Contains(err.Error(), "other machine") {
					t.Fatalf("size %d at %d: another's envelope: %v", size, at, err)
				}
				// Its proof with this payload: not verified.
				var e models.BatchEnvelope
				_ = json.Unmarshal(other, &e)
				e.Payload = p
				b, _ := json.Marshal(e)
				if _, err := verify(b, fuzzTrust(), "m1"); err == nil || !strings.HasPrefix(err.Error(), "not verified") {
					t.Fatalf("size %d at %d: a payload with another's proof: %v", size, at, err)
				}
			}
		}
	}
	if _, err := verify(batchOf(t, "k1", otherKey, p)[0], fuzzTrust(), "m1"); err == nil || !strings.HasPrefix(err.Error(), "not verified") {
		t.Fatalf("a batch signed by an untrusted key: %v", err)
	}
	single := envelopeOf(t, p, models.Signature{KeyID: "k1", Sig: ed25519.Sign(fuzzKey, p)})
	if _, err := verify(single, fuzzTrust(), "m1"); err != nil {
		t.Fatalf("a single-signature envelope: %v", err)
	}
}

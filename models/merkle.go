package models

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// A batch envelope carries one payload of a batch of declarations composed
// together, the batch's Merkle root signed once, and the payload's
// inclusion proof: one ed25519 signature per batch instead of one per
// machine (the Certificate Transparency pattern; hashing as RFC 6962/9162:
// a leaf is SHA-256(0x00 || payload bytes), a node SHA-256(0x01 || left ||
// right), so no leaf can pass for a node). The host hashes its exact
// payload bytes into the leaf, so it checks that those bytes, and no
// others, are in the tree the controller signed.

// HeaderEnvelope is the poll header by which a host says which envelope
// formats it verifies besides the single-signature one: "batch".
const HeaderEnvelope = "X-Mesh-Envelope"

// MaxDeclaration caps a poll's 200 body, the envelope: a host refuses a
// larger one unread.
const MaxDeclaration = 16 << 20

// MaxPayload is the largest declaration payload composed: its envelope
// (the payload in base64, four bytes for three, and at most a few KiB of
// proof and signatures) stays under MaxDeclaration. A larger one is a
// compose failure, recorded once, not a send every host refuses.
const MaxPayload = (MaxDeclaration - 64<<10) / 4 * 3

// HeaderFinishedSend is the poll header naming the send by which its host
// received the generation it finished (If-None-Match): a store restored
// from a backup may have reused that generation's number for other
// content, and a host at "the same" generation by a send this store never
// made is in conflict, not current.
const HeaderFinishedSend = "X-Mesh-Finished-Send"

// EnvelopeBatch is the X-Mesh-Envelope token of the batch envelope.
const EnvelopeBatch = "batch"

// MaxProofLen bounds an inclusion proof: a tree of 2^64 leaves has a path
// of 64 hashes, so a longer one is refused before any hashing.
const MaxProofLen = 64

// BatchEnvelope is the poll's 200 body for a host that verifies batches.
type BatchEnvelope struct {
	Payload []byte     `json:"payload"` // base64 in JSON
	Batch   BatchProof `json:"batch"`
}

// BatchProof places a payload in a signed batch: the leaf's index in a
// tree of Size leaves, the audit path from the leaf up (RFC 9162 2.1.3),
// the root, and the signatures over BatchStatement(Size, Root).
type BatchProof struct {
	Size       int64       `json:"size"`
	Index      int64       `json:"index"`
	Path       [][]byte    `json:"path"`
	Root       []byte      `json:"root"`
	Signatures []Signature `json:"signatures"`
}

// BatchStatement is what the root signature signs: the tree's size and
// root under a prefix of their own, so no payload (JSON) or other
// statement the declaration key signs reads as one.
func BatchStatement(size int64, root []byte) []byte {
	return fmt.Appendf(nil, "mesh-declaration-batch/v1\n%d\n%s\n", size, hex.EncodeToString(root))
}

// MerkleLeaf is the leaf hash of one payload.
func MerkleLeaf(payload []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte{0})
	h.Write(payload)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

func merkleNode(l, r []byte) [32]byte {
	// On the stack: a hash.Hash per node was an allocation per node.
	var in [1 + 2*sha256.Size]byte
	in[0] = 1
	copy(in[1:], l)
	copy(in[1+sha256.Size:], r)
	return sha256.Sum256(in[:])
}

// MerkleTree is the root of leaves (RFC 6962's MTH) and every leaf's
// audit path, bottom up. It hashes each node once.
func MerkleTree(leaves [][32]byte) (root [32]byte, paths [][][]byte) {
	paths = make([][][]byte, len(leaves))
	if len(leaves) == 0 {
		return sha256.Sum256(nil), paths
	}
	// Every path in one backing array, each with room for the deepest
	// path: appended hash by hash, each grew four or five times.
	depth := bits.Len(uint(len(leaves) - 1))
	backing := make([][]byte, len(leaves)*depth)
	for i := range paths {
		paths[i] = backing[i*depth : i*depth : (i+1)*depth]
	}
	var build func(lo, hi int) [32]byte
	build = func(lo, hi int) [32]byte {
		if hi-lo == 1 {
			return leaves[lo]
		}
		k := 1 << (bits.Len(uint(hi-lo-1)) - 1) // the largest power of two below hi-lo
		l, r := build(lo, lo+k), build(lo+k, hi)
		for i := lo; i < lo+k; i++ {
			paths[i] = append(paths[i], r[:])
		}
		for i := lo + k; i < hi; i++ {
			paths[i] = append(paths[i], l[:])
		}
		return merkleNode(l[:], r[:])
	}
	return build(0, len(leaves)), paths
}

// ErrInclusion is an inclusion proof that does not lead to its root.
var ErrInclusion = errors.New("inclusion proof does not verify")

// VerifyInclusion checks that leaf is at index in the tree of size leaves
// whose root is root (RFC 9162 2.1.3.2). Sizes are exact: 0 <= index <
// size, a root and every path hash of 32 bytes, at most MaxProofLen hashes,
// and exactly as many as the tree's shape needs.
func VerifyInclusion(leaf [32]byte, index, size int64, path [][]byte, root []byte) error {
	switch {
	case size < 1 || index < 0 || index >= size:
		return fmt.Errorf("%w: leaf %d of a tree of %d", ErrInclusion, index, size)
	case len(path) > MaxProofLen:
		return fmt.Errorf("%w: %d hashes in the path (at most %d)", ErrInclusion, len(path), MaxProofLen)
	case len(root) != sha256.Size:
		return fmt.Errorf("%w: a root of %d bytes", ErrInclusion, len(root))
	}
	fn, sn := uint64(index), uint64(size-1)
	r := leaf
	for _, p := range path {
		if len(p) != sha256.Size {
			return fmt.Errorf("%w: a path hash of %d bytes", ErrInclusion, len(p))
		}
		if sn == 0 {
			return fmt.Errorf("%w: the path is longer than the tree is deep", ErrInclusion)
		}
		if fn&1 == 1 || fn == sn {
			r = merkleNode(p, r[:])
			for fn&1 == 0 && fn != 0 {
				fn >>= 1
				sn >>= 1
			}
		} else {
			r = merkleNode(r[:], p)
		}
		fn >>= 1
		sn >>= 1
	}
	if sn != 0 {
		return fmt.Errorf("%w: the path is shorter than the tree is deep", ErrInclusion)
	}
	if !bytes.Equal(r[:], root) {
		return fmt.Errorf("%w: it leads to another root", ErrInclusion)
	}
	return nil
}

// AcceptsBatch reports whether an X-Mesh-Envelope header value names the
// batch envelope: a comma-separated list of tokens, unknown ones ignored
// (a later host may name formats this controller does not make).
func AcceptsBatch(header string) bool {
	for _, t := range strings.Split(header, ",") {
		if strings.TrimSpace(t) == EnvelopeBatch {
			return true
		}
	}
	return false
}

// SealBatch signs a batch of payloads once: it returns each payload's
// batch envelope, in order. The envelopes are the bytes json.Marshal
// makes of a BatchEnvelope (TestSealBatch_AsMarshalled holds them to it),
// written directly: the part after the audit path — root and signatures —
// is the same for the whole batch, so it is encoded once, and each
// envelope is one allocation of its exact size. Marshalling each whole was
// ~2 µs of the ~11 a machine sealing took (BenchmarkSeal_Batch500).
func SealBatch(payloads [][]byte, signer Signer) ([][]byte, error) {
	leaves := make([][32]byte, len(payloads))
	for i, p := range payloads {
		leaves[i] = MerkleLeaf(p)
	}
	root, paths := MerkleTree(leaves)
	size := int64(len(payloads))
	sigs, err := json.Marshal([]Signature{{KeyID: signer.KeyID(), Sig: signer.Sign(BatchStatement(size, root[:]))}})
	if err != nil {
		return nil, err
	}
	rootB64 := base64.StdEncoding.EncodeToString(root[:])
	tail := make([]byte, 0, len(rootB64)+len(sigs)+32)
	tail = append(tail, `],"root":"`...)
	tail = append(tail, rootB64...)
	tail = append(tail, `","signatures":`...)
	tail = append(tail, sigs...)
	tail = append(tail, "}}"...)
	head := strconv.AppendInt([]byte(`","batch":{"size":`), size, 10)
	head = append(head, `,"index":`...)
	hashLen := base64.StdEncoding.EncodedLen(sha256.Size)
	out := make([][]byte, len(payloads))
	for i, p := range payloads {
		path := paths[i]
		n := len(`{"payload":"`) + base64.StdEncoding.EncodedLen(len(p)) + len(head) + 20 +
			len(`,"path":[`) + len(path)*(hashLen+3) + len(tail)
		b := make([]byte, 0, n)
		if p == nil {
			b = append(b, `{"payload":null`...)
			b = append(b, head[1:]...)
		} else {
			b = append(b, `{"payload":"`...)
			b = base64.StdEncoding.AppendEncode(b, p)
			b = append(b, head...)
		}
		b = strconv.AppendInt(b, int64(i), 10)
		b = append(b, `,"path":[`...)
		for j, h := range path {
			if j > 0 {
				b = append(b, ',')
			}
			b = append(b, '"')
			b = base64.StdEncoding.AppendEncode(b, h)
			b = append(b, '"')
		}
		out[i] = append(b, tail...)
	}
	return out, nil
}

// SealOne is the single-signature envelope of a payload, as every host
// verifies it (and as hosts before batch envelopes only verify).
func SealOne(payload []byte, signer Signer) ([]byte, error) {
	return json.Marshal(Envelope{Payload: payload, Signatures: []Signature{{KeyID: signer.KeyID(), Sig: signer.Sign(payload)}}})
}

// PayloadOf is the payload stored envelope bytes carry, either format
// (read leniently: the bytes were verified or composed here).
func PayloadOf(envelope []byte) ([]byte, error) {
	var e struct {
		Payload []byte `json:"payload"`
	}
	if err := json.Unmarshal(envelope, &e); err != nil {
		return nil, err
	}
	return e.Payload, nil
}

// OpenEnvelope verifies a poll's 200 body, either format, and returns its
// payload bytes: strictly decoded (no unknown fields, nothing after it), a
// single-signature envelope needs a signature over the payload, a batch
// envelope a valid inclusion proof of the payload and a signature over
// its root; valid says whether sig is keyID's signature of msg by a
// trusted key. An envelope that carries both kinds is refused.
func OpenEnvelope(body []byte, valid func(keyID string, msg, sig []byte) bool) ([]byte, error) {
	var env struct {
		Payload    []byte      `json:"payload"`
		Signatures []Signature `json:"signatures"`
		Batch      *BatchProof `json:"batch"`
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		return nil, fmt.Errorf("not a declaration envelope: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not a declaration envelope: trailing data after it")
	}
	signed := func(sigs []Signature, msg []byte) bool {
		for _, s := range sigs {
			if valid(s.KeyID, msg, s.Sig) {
				return true
			}
		}
		return false
	}
	if env.Batch == nil {
		if !signed(env.Signatures, env.Payload) {
			return nil, errors.New("not verified: no signature by a trusted key")
		}
		return env.Payload, nil
	}
	b := env.Batch
	if env.Signatures != nil {
		return nil, errors.New("not a declaration envelope: both signatures and a batch proof")
	}
	if err := VerifyInclusion(MerkleLeaf(env.Payload), b.Index, b.Size, b.Path, b.Root); err != nil {
		return nil, fmt.Errorf("not verified: %v", err)
	}
	if !signed(b.Signatures, BatchStatement(b.Size, b.Root)) {
		return nil, errors.New("not verified: no signature of the batch root by a trusted key")
	}
	return env.Payload, nil
}

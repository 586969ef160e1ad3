// Package merkletest is a reference for tests of batch envelopes: the
// root of an RFC 6962 Merkle tree recomputed from a leaf and its audit
// path by the RFC's recursive definition, independent of the loop
// models.VerifyInclusion runs.
package merkletest

import "crypto/sha256"

// RootFrom is the root of a tree of n leaves whose leaf m has the hash
// leaf, the siblings taken from path bottom up (RFC 6962 2.1.1's PATH,
// read back). It returns the path left over, and false when the path is
// too short or holds a hash that is not 32 bytes.
func RootFrom(leaf []byte, m, n uint64, path [][]byte) ([]byte, [][]byte, bool) {
	if n == 1 {
		return leaf, path, m == 0
	}
	k := uint64(1)
	for k*2 < n {
		k *= 2
	}
	var sub []byte
	var ok bool
	if m < k {
		sub, path, ok = RootFrom(leaf, m, k, path)
	} else {
		sub, path, ok = RootFrom(leaf, m-k, n-k, path)
	}
	if !ok || len(path) == 0 || len(path[0]) != 32 {
		return nil, nil, false
	}
	l, r := sub, path[0]
	if m >= k {
		l, r = r, l
	}
	h := sha256.Sum256(append(append([]byte{1}, l...), r...))
	return h[:], path[1:], true
}

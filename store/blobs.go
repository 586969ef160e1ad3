package store

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"time"

	"gorm.io/gorm"

	"mesh/models"
)

// Blobs are content-addressed and stored as chunks (blob_chunks, keyed by
// digest and seq) under a head row in blobs (digest, size, chunk size), so
// that an upload is written and a download read one chunk at a time: no
// artifact is ever held whole in memory, and every replica serves the same
// bytes.

// ChunkSize is the size of a blob's chunks; the last one may be shorter.
const ChunkSize = 1 << 20

// BlobGrace is how long an upload that never finished, or a blob that no
// build or host release names (its build was refused after the upload),
// is kept before an upload sweeps it. It is far longer than any upload
// or the workflow that follows one.
const BlobGrace = 24 * time.Hour

// uploadKey prefixes the digest column of an upload in progress: its
// chunks are written before their digest is known, under a head row of
// its own, and moved under the digest when the last byte is read. It is
// never a sha256 digest, so no reader finds it.
const uploadKey = "upload:"

// PutBlob streams r into the store a chunk at a time, hashing as it reads,
// and returns the stored blob. Each chunk is its own short transaction, so
// an upload holds no lock while it waits for the client; the blob appears
// (under its digest, complete) in one last transaction. Storing bytes that
// are stored already keeps the stored copy. A read error of r is returned
// wrapped (%w), so a body over its limit stays *http.MaxBytesError.
//
// A failed upload deletes what it wrote; what a crash leaves, and blobs no
// build names, are swept by a later upload after BlobGrace.
func (s *Store) PutBlob(ctx context.Context, r io.Reader) (*models.Blob, error) {
	if err := s.sweepBlobs(ctx); err != nil {
		return nil, fmt.Errorf("sweep blobs: %w", err)
	}
	key, err := s.startUpload(ctx)
	if err != nil {
		return nil, err
	}
	b, err := s.putChunks(ctx, key, r)
	if err != nil {
		// Frees the space now (the disk may be what failed); the sweep
		// takes it later if this fails too.
		_ = s.dropBlob(context.WithoutCancel(ctx), key)
		return nil, err
	}
	return b, nil
}

// startUpload writes the head row of an upload in progress: its age is
// what the sweep judges it by.
func (s *Store) startUpload(ctx context.Context) (string, error) {
	rnd := make([]byte, 12)
	_, _ = rand.Read(rnd)
	key := uploadKey + hex.EncodeToString(rnd)
	err := s.write(ctx, func(tx *Tx) error {
		return tx.Exec("INSERT INTO blobs (digest, size, chunk_size, data, created_at) VALUES (?, 0, ?, ?, ?)",
			key, ChunkSize, []byte{}, tx.s.Now()).Error
	})
	return key, err
}

// putChunks reads r into one reused chunk buffer, writes each chunk as it
// fills, and moves the chunks under their digest at the end.
func (s *Store) putChunks(ctx context.Context, key string, r io.Reader) (*models.Blob, error) {
	h := sha256.New()
	buf := make([]byte, ChunkSize)
	var size, seq int64
	for {
		n, rerr := io.ReadFull(r, buf)
		if n > 0 {
			h.Write(buf[:n])
			err := s.write(ctx, func(tx *Tx) error {
				return tx.Exec("INSERT INTO blob_chunks (digest, seq, data) VALUES (?, ?, ?)", key, seq, buf[:n]).Error
			})
			if err != nil {
				return nil, fmt.Errorf("store chunk %d of an upload: %w", seq, err)
			}
			seq++
			size += int64(n)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("read the upload: %w", rerr)
		}
	}
	digest := "sha256:" + hex.EncodeToString(h.Sum(nil))
	return Write(ctx, s, func(tx *Tx) (*models.Blob, error) { return finishUpload(tx, key, digest, size, seq) })
}

// finishUpload makes the upload's chunks the blob of digest, in one
// transaction, or drops them when that blob is stored already.
func finishUpload(tx *Tx, key, digest string, size, chunks int64) (*models.Blob, error) {
	now := tx.s.Now()
	// ON CONFLICT waits for a concurrent upload of the same bytes to
	// commit, then inserts nothing: exactly one of them moves its chunks.
	ins := tx.Exec("INSERT INTO blobs (digest, size, chunk_size, data, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (digest) DO NOTHING",
		digest, size, ChunkSize, []byte{}, now)
	if ins.Error != nil {
		return nil, ins.Error
	}
	if ins.RowsAffected == 1 {
		// A chunk a statement: a statement that may fail partway keeps a
		// journal of the pages it changed until it ends (SQLite's, in
		// memory), so one statement moving every chunk held the whole
		// artifact's pages there.
		for seq := range chunks {
			mv := tx.Exec("UPDATE blob_chunks SET digest = ? WHERE digest = ? AND seq = ?", digest, key, seq)
			if mv.Error != nil {
				return nil, mv.Error
			}
			if mv.RowsAffected != 1 {
				return nil, fmt.Errorf("upload of %s: chunk %d of its %d is not stored", digest, seq, chunks)
			}
		}
	} else {
		if err := tx.Exec("DELETE FROM blob_chunks WHERE digest = ?", key).Error; err != nil {
			return nil, err
		}
		// Young again, so no sweep takes it before the build that names
		// it commits.
		if err := tx.Exec("UPDATE blobs SET created_at = ? WHERE digest = ?", now, digest).Error; err != nil {
			return nil, err
		}
	}
	if err := tx.Exec("DELETE FROM blobs WHERE digest = ?", key).Error; err != nil {
		return nil, err
	}
	return blobHead(tx.DB, digest)
}

// dropBlob deletes a blob (or an upload in progress) and its chunks.
func (s *Store) dropBlob(ctx context.Context, digest string) error {
	return s.write(ctx, func(tx *Tx) error {
		if err := tx.Exec("DELETE FROM blob_chunks WHERE digest = ?", digest).Error; err != nil {
			return err
		}
		return tx.Exec("DELETE FROM blobs WHERE digest = ?", digest).Error
	})
}

// sweepBlobs deletes, with their chunks, uploads that never finished and
// blobs no build or host release names, older than BlobGrace. Builds and
// releases are never deleted, so a blob one names is kept for good.
func (s *Store) sweepBlobs(ctx context.Context) error {
	cutoff := s.Now().Add(-BlobGrace)
	return s.write(ctx, func(tx *Tx) error {
		stale := tx.Table("blobs").Select("digest").Where("created_at < ?", cutoff).
			Where("NOT EXISTS (SELECT 1 FROM builds WHERE builds.digest = blobs.digest)").
			Where("NOT EXISTS (SELECT 1 FROM host_releases WHERE host_releases.digest = blobs.digest)")
		if err := tx.Exec("DELETE FROM blob_chunks WHERE digest IN (?)", stale).Error; err != nil {
			return err
		}
		return tx.Exec("DELETE FROM blobs WHERE digest IN (?)", stale).Error
	})
}

// needBlob checks, inside the transaction that records a build or a
// release, that the blob it names is stored.
func needBlob(tx *Tx, digest string) error {
	var n int64
	if err := tx.Table("blobs").Where("digest = ?", digest).Count(&n).Error; err != nil {
		return err
	}
	if n == 0 || !models.ValidDigest(digest) {
		return fmt.Errorf("artifact %s: %w: upload it first", digest, models.ErrNotFound)
	}
	return nil
}

// blobHead reads a blob's head row: never its bytes.
func blobHead(db *gorm.DB, digest string) (*models.Blob, error) {
	var b models.Blob
	err := db.Table("blobs").Select("digest, size, chunk_size, created_at").Where("digest = ?", digest).Take(&b).Error
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", digest, mapErr(err))
	}
	return &b, nil
}

// OpenBlob reads a blob's head and returns a reader of its bytes that
// reads only the chunks it is asked for: Seek moves without reading, and a
// read fetches the one chunk its offset falls in (http.ServeContent seeks
// to a range's start and reads its length).
func (s *Store) OpenBlob(ctx context.Context, digest string) (*models.Blob, io.ReadSeeker, error) {
	b, err := blobHead(s.db.WithContext(ctx), digest)
	if err != nil {
		return nil, nil, err
	}
	return b, &blobReader{ctx: ctx, s: s, head: *b, seq: -1}, nil
}

// blobReader reads a blob a chunk at a time, keeping the last chunk read.
type blobReader struct {
	ctx  context.Context
	s    *Store
	head models.Blob
	off  int64
	seq  int64 // the chunk in buf; -1 before the first
	buf  []byte
}

// chunkSize is the blob's chunk size; a blob written before chunks
// (chunk_size 0) is one chunk, its bytes in blobs.data.
func (r *blobReader) chunkSize() int64 {
	if r.head.ChunkSize > 0 {
		return r.head.ChunkSize
	}
	return max(r.head.Size, 1)
}

func (r *blobReader) Read(p []byte) (int, error) {
	if r.off >= r.head.Size {
		return 0, io.EOF
	}
	cs := r.chunkSize()
	seq := r.off / cs
	if seq != r.seq {
		if err := r.load(seq, min(cs, r.head.Size-seq*cs)); err != nil {
			return 0, err
		}
	}
	n := copy(p, r.buf[r.off-seq*cs:])
	r.off += int64(n)
	return n, nil
}

// load reads chunk seq, of want bytes, into the reused buffer.
func (r *blobReader) load(seq, want int64) error {
	q := r.s.db.WithContext(r.ctx).Raw("SELECT data FROM blob_chunks WHERE digest = ? AND seq = ?", r.head.Digest, seq)
	if r.head.ChunkSize == 0 {
		q = r.s.db.WithContext(r.ctx).Raw("SELECT data FROM blobs WHERE digest = ?", r.head.Digest)
	}
	rows, err := q.Rows()
	if err != nil {
		return fmt.Errorf("blob %s chunk %d: %w", r.head.Digest, seq, mapErr(err))
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return fmt.Errorf("blob %s chunk %d: %w", r.head.Digest, seq, mapErr(err))
		}
		return fmt.Errorf("blob %s chunk %d: %w", r.head.Digest, seq, models.ErrNotFound)
	}
	// RawBytes is the driver's own buffer: copied once, into ours.
	var raw sql.RawBytes
	if err := rows.Scan(&raw); err != nil {
		return fmt.Errorf("blob %s chunk %d: %w", r.head.Digest, seq, mapErr(err))
	}
	if int64(len(raw)) != want {
		return fmt.Errorf("blob %s chunk %d: %d bytes stored, %d expected", r.head.Digest, seq, len(raw), want)
	}
	r.buf = append(r.buf[:0], raw...)
	r.seq = seq
	return nil
}

func (r *blobReader) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		offset += r.off
	case io.SeekEnd:
		offset += r.head.Size
	default:
		return 0, errors.New("blob: bad whence")
	}
	if offset < 0 {
		return 0, errors.New("blob: seek before the start")
	}
	r.off = offset
	return offset, nil
}

// BlobSent reports whether the machine was ever sent a declaration naming the
// digest: a host may read only the blobs it was sent.
func (s *Store) BlobSent(ctx context.Context, machineID int64, digest string) (bool, error) {
	var n int64
	err := s.db.WithContext(ctx).Model(&models.Declaration{}).
		Where("machine_id = ? AND artifacts LIKE ?", machineID, "%"+digest+"%").Count(&n).Error
	return n > 0, mapErr(err)
}

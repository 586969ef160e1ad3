-- +goose Up
-- Blobs are stored as chunks of chunk_size bytes (1 MiB), so that an
-- upload is written and a download (or a range of one) read a chunk at a
-- time, never the whole artifact in memory. The blobs row keeps the
-- digest, size and chunk size. chunk_size 0 marks a row whose bytes are
-- still in blobs.data: one written by a build older than this migration
-- (which may still serve beside a newer one); it is read as one chunk.
ALTER TABLE blobs ADD COLUMN chunk_size BIGINT NOT NULL DEFAULT 0;

CREATE TABLE blob_chunks (
    digest TEXT NOT NULL,
    seq BIGINT NOT NULL,
    data BYTEA NOT NULL,
    PRIMARY KEY (digest, seq)
);
-- Artifacts are compressed already: do not try to compress them again.
ALTER TABLE blob_chunks ALTER COLUMN data SET STORAGE EXTERNAL;

-- The blobs stored so far become chunks. Each piece is split in halves
-- (at a chunk boundary) until it is one chunk: cutting one chunk at a time
-- would read the whole value once per chunk, quadratic in its size; halves
-- read it about log2(chunks) times. blobs.data is kept (expand before
-- contract): a controller one build behind still serves from it; a later
-- migration empties it.
WITH RECURSIVE pieces(digest, seq, n, piece) AS (
    SELECT digest, 0, (length(data) + 1048575) / 1048576, data FROM blobs WHERE length(data) > 0
    UNION ALL
    SELECT p.digest, p.seq + h.k * (p.n / 2),
        CASE WHEN h.k = 0 THEN p.n / 2 ELSE p.n - p.n / 2 END,
        CASE WHEN h.k = 0 THEN substr(p.piece, 1, (p.n / 2) * 1048576)
            ELSE substr(p.piece, (p.n / 2) * 1048576 + 1, length(p.piece)) END
    FROM pieces p CROSS JOIN (SELECT 0 AS k UNION ALL SELECT 1) h
    WHERE p.n > 1
)
INSERT INTO blob_chunks (digest, seq, data)
SELECT digest, seq, piece FROM pieces WHERE n = 1;

UPDATE blobs SET chunk_size = 1048576;

-- An upload sweeps blobs that no build or host release names (store/blobs.go).
CREATE INDEX builds_digest ON builds (digest);
CREATE INDEX host_releases_digest ON host_releases (digest);

-- +goose Down
DROP INDEX host_releases_digest;
DROP INDEX builds_digest;
DROP TABLE blob_chunks;
ALTER TABLE blobs DROP COLUMN chunk_size;

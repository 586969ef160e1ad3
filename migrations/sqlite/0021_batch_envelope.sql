-- +goose Up
-- One signature per batch: a declaration composed in a batch stores its
-- batch envelope (payload, inclusion proof, the batch root's signature),
-- what a host that sends X-Mesh-Envelope: batch gets. envelope, the
-- single-signature one every other host gets, is signed on first need
-- and stored then; until then it is empty. Rows stored before have no
-- batch envelope (NULL) and their single one.
ALTER TABLE declarations ADD COLUMN batch BLOB;

-- +goose Down
ALTER TABLE declarations DROP COLUMN batch;

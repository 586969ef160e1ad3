-- +goose Up
-- When the machine's latest certificate begins: a certificate presented
-- that begins after it was issued after it (by a timeline the store lost,
-- restored from a backup taken before its host renewed) and is taken as
-- the latest; its end says nothing of that once the lifetime changed.
ALTER TABLE machines ADD COLUMN cert_not_before TIMESTAMPTZ;

-- +goose Down
ALTER TABLE machines DROP COLUMN cert_not_before;

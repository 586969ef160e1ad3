-- +goose Up
-- The serial of the client certificate a machine's host has presented (its
-- first use recorded). A newer certificate, once presented, retires the one
-- used before; the host token asks for another only while the latest was
-- never presented (its answer lost).
ALTER TABLE machines ADD COLUMN cert_in_use TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN cert_in_use;

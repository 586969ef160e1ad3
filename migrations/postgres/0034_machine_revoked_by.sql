-- +goose Up
-- Who revoked a machine (a person, "controller" for a certificate past its
-- grace): its state says when and by whom, as a join token's does.
ALTER TABLE machines ADD COLUMN revoked_by TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN revoked_by;

-- +goose Up
-- Who revoked a machine (a person, "controller" for a certificate past its
-- grace): its state says when and by whom, as a join token's does.
ALTER TABLE machines ADD COLUMN revoked_by TEXT NOT NULL DEFAULT '';
-- Machines revoked before: who, where their revocation is still kept.
UPDATE machines SET revoked_by = COALESCE((SELECT r.revoked_by FROM revocations r
    WHERE r.token_id = machines.token_id AND r.kind = 'machine'), '')
 WHERE revoked_at IS NOT NULL;

-- +goose Down
ALTER TABLE machines DROP COLUMN revoked_by;

-- +goose Up
-- A machine known by certificate: the serial and expiry of the client
-- certificate last issued to it (empty: a host on its bearer token only),
-- and, once its identity is revoked (by a person, or a certificate
-- presented past its renewal grace), when and why: the machine state
-- 'revoked'. The refusal itself goes through the one revocation mechanism
-- (revocations, by the machine's enrolment id).
ALTER TABLE machines ADD COLUMN cert_serial TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN cert_not_after TIMESTAMPTZ;
ALTER TABLE machines ADD COLUMN revoked_at TIMESTAMPTZ;
ALTER TABLE machines ADD COLUMN revoked_reason TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN revoked_reason;
ALTER TABLE machines DROP COLUMN revoked_at;
ALTER TABLE machines DROP COLUMN cert_not_after;
ALTER TABLE machines DROP COLUMN cert_serial;

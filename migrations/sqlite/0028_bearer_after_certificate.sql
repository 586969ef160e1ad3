-- +goose Up
-- A machine that holds a certificate is its certificate: its bearer token
-- alone is refused from then on (models.RevokedBearer), so a copied
-- host.json cannot poll as it or ask a certificate for a key of its own.
-- New certificates revoke it as they are recorded; this does it for the
-- machines that hold one already.
INSERT INTO revocations (token_id, kind, reason, revoked_by, revoked_at, expires_at)
SELECT 'bearer:' || token_id, 'bearer', 'the machine holds a certificate', 'controller',
       strftime('%Y-%m-%d %H:%M:%f+00:00', 'now'), strftime('%Y-%m-%d %H:%M:%f+00:00', 'now', '+100 years')
FROM machines WHERE cert_serial <> '' AND token_id <> ''
ON CONFLICT (token_id) DO NOTHING;

-- +goose Down
DELETE FROM revocations WHERE kind = 'bearer';

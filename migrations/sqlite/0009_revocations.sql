-- +goose Up
-- Revoked token ids (a logged-out session, later API tokens and machine
-- certificates), kept until the token would have expired anyway. Every
-- instance holds them in memory and checks each request against them.
CREATE TABLE revocations (
    token_id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    revoked_by TEXT NOT NULL DEFAULT '',
    revoked_at DATETIME NOT NULL,
    expires_at DATETIME NOT NULL
);
CREATE INDEX revocations_expires ON revocations (expires_at);

-- +goose Down
DROP TABLE revocations;

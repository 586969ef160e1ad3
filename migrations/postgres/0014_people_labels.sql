-- +goose Up
-- A disabled user cannot log in; the tokens they held were revoked through
-- the revocations table when they were disabled.
ALTER TABLE users ADD COLUMN disabled_at TIMESTAMPTZ;
ALTER TABLE users ADD COLUMN disabled_by TEXT NOT NULL DEFAULT '';

-- Long-lived API tokens of people and builders: only the hash of the token
-- is kept. Revoking one writes its id to revocations (the one mechanism);
-- revoked_at here is for the listing. last_used_at is flushed from memory
-- at most once a minute, never written by the request that used it.
CREATE TABLE api_tokens (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    user_name TEXT NOT NULL,
    role TEXT NOT NULL,
    token_hash TEXT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL,
    last_used_at TIMESTAMPTZ,
    revoked_at TIMESTAMPTZ,
    revoked_by TEXT NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX api_tokens_hash ON api_tokens (token_hash);
CREATE INDEX api_tokens_user ON api_tokens (user_name);

-- Labels of a machine (key=value), set by an operator or at enrolment from
-- the join token, never by the host itself.
CREATE TABLE machine_labels (
    machine_id BIGINT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (machine_id, key)
);
ALTER TABLE join_tokens ADD COLUMN labels TEXT NOT NULL DEFAULT '{}';
-- A module's selector ('role=web,zone!=b'); empty: it goes only where assigned.
ALTER TABLE modules ADD COLUMN selector TEXT NOT NULL DEFAULT '';
-- An assignment row is there because a person assigned the module
-- (assigned), because the module's selector matches the machine's labels
-- (selected), or both; it goes when neither holds.
ALTER TABLE assignments ADD COLUMN assigned BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE assignments ADD COLUMN selected BOOLEAN NOT NULL DEFAULT FALSE;

-- +goose Down
ALTER TABLE assignments DROP COLUMN selected;
ALTER TABLE assignments DROP COLUMN assigned;
ALTER TABLE modules DROP COLUMN selector;
ALTER TABLE join_tokens DROP COLUMN labels;
DROP TABLE machine_labels;
DROP TABLE api_tokens;
ALTER TABLE users DROP COLUMN disabled_by;
ALTER TABLE users DROP COLUMN disabled_at;

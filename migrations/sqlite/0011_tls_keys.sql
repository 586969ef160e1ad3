-- +goose Up
-- The TLS secrets every replica shares: the mesh CA (its certificate and
-- PKCS#8 private key, DER) and the session ticket keys (no certificate).
-- A private key is sealed at rest when the controller has a key, as the
-- signing keys in `keys` are.
CREATE TABLE tls_keys (
    id TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    certificate BLOB NOT NULL,
    private_key BLOB NOT NULL,
    created_at DATETIME NOT NULL
);

-- +goose Down
DROP TABLE tls_keys;

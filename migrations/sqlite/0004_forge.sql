-- +goose Up
CREATE TABLE sources (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL,
    repository TEXT NOT NULL,
    default_branch TEXT NOT NULL,
    secret TEXT NOT NULL,
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX sources_name ON sources (name);

CREATE TABLE deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source_id INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    delivery_id TEXT NOT NULL,
    event TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT '',
    received_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX deliveries_source_delivery ON deliveries (source_id, delivery_id);

CREATE TABLE merges (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    source_id INTEGER NOT NULL REFERENCES sources (id) ON DELETE CASCADE,
    repository TEXT NOT NULL,
    source_commit TEXT NOT NULL,
    author TEXT NOT NULL DEFAULT '',
    paths TEXT NOT NULL DEFAULT '[]',
    created_at DATETIME NOT NULL
);

-- Expand only: a build is ready unless queued from a merge.
ALTER TABLE builds ADD COLUMN state TEXT NOT NULL DEFAULT 'ready';
ALTER TABLE builds ADD COLUMN merge_id INTEGER;
ALTER TABLE builds ADD COLUMN lease_owner TEXT NOT NULL DEFAULT '';
ALTER TABLE builds ADD COLUMN lease_until DATETIME;

-- +goose Down
ALTER TABLE builds DROP COLUMN lease_until;
ALTER TABLE builds DROP COLUMN lease_owner;
ALTER TABLE builds DROP COLUMN merge_id;
ALTER TABLE builds DROP COLUMN state;
DROP TABLE merges;
DROP TABLE deliveries;
DROP TABLE sources;

-- +goose Up
CREATE TABLE host_releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL,
    os TEXT NOT NULL,
    arch TEXT NOT NULL,
    digest TEXT NOT NULL,
    size INTEGER NOT NULL,
    key_id TEXT NOT NULL,
    signature BLOB NOT NULL,
    state TEXT NOT NULL DEFAULT 'ready',
    failure TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX host_releases_version_platform ON host_releases (version, os, arch);

CREATE TABLE rollouts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    version TEXT NOT NULL,
    state TEXT NOT NULL,
    canary TEXT NOT NULL DEFAULT '1',
    max_in_flight INTEGER NOT NULL DEFAULT 1,
    deadline_seconds INTEGER NOT NULL DEFAULT 600,
    reason TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL,
    finished_at DATETIME
);
CREATE INDEX rollouts_version ON rollouts (version);

CREATE TABLE rollout_machines (
    rollout_id INTEGER NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    wave INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    previous TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    PRIMARY KEY (rollout_id, machine_id)
);

CREATE TABLE settings (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- +goose Down
DROP TABLE settings;
DROP TABLE rollout_machines;
DROP TABLE rollouts;
DROP TABLE host_releases;

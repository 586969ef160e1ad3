-- +goose Up
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    version TEXT NOT NULL DEFAULT '',
    build INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL DEFAULT 'starting',
    started_at DATETIME NOT NULL,
    heartbeat_at DATETIME NOT NULL
);

CREATE TABLE keys (
    id TEXT PRIMARY KEY,
    purpose TEXT NOT NULL,
    private_key BLOB NOT NULL,
    public_key BLOB NOT NULL,
    created_at DATETIME NOT NULL
);

CREATE TABLE users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    role TEXT NOT NULL,
    password_hash TEXT NOT NULL,
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX users_name ON users (name);

CREATE TABLE join_tokens (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash TEXT NOT NULL,
    expires_at DATETIME NOT NULL,
    used_at DATETIME,
    used_by TEXT NOT NULL DEFAULT '',
    created_by TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX join_tokens_hash ON join_tokens (token_hash);

CREATE TABLE machines (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    os TEXT NOT NULL DEFAULT '',
    arch TEXT NOT NULL DEFAULT '',
    host_version TEXT NOT NULL DEFAULT '',
    schema TEXT NOT NULL DEFAULT '',
    generation INTEGER NOT NULL DEFAULT 0,
    generation_trigger TEXT NOT NULL DEFAULT '',
    generation_at DATETIME NOT NULL,
    empty_ok BOOLEAN NOT NULL DEFAULT FALSE,
    target_host_version TEXT NOT NULL DEFAULT '',
    applied_generation INTEGER NOT NULL DEFAULT 0,
    finished_generation INTEGER NOT NULL DEFAULT 0,
    last_outcome TEXT NOT NULL DEFAULT '',
    last_reason TEXT NOT NULL DEFAULT '',
    last_report_at DATETIME,
    running TEXT NOT NULL DEFAULT '{}',
    conflict BOOLEAN NOT NULL DEFAULT FALSE,
    conflict_host_generation INTEGER NOT NULL DEFAULT 0,
    token_id TEXT NOT NULL DEFAULT '',
    last_seen DATETIME,
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX machines_name ON machines (name);

CREATE TABLE machine_variables (
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    key TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (machine_id, key)
);

CREATE TABLE modules (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL,
    kind TEXT NOT NULL DEFAULT 'service',
    repository TEXT NOT NULL DEFAULT '',
    source_paths TEXT NOT NULL DEFAULT '[]',
    tiers TEXT NOT NULL DEFAULT '[]',
    current_build INTEGER,
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX modules_name ON modules (name);

CREATE TABLE builds (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    module_id INTEGER NOT NULL REFERENCES modules (id),
    number INTEGER NOT NULL,
    version TEXT NOT NULL DEFAULT '',
    source_commit TEXT NOT NULL DEFAULT '',
    digest TEXT NOT NULL DEFAULT '',
    size INTEGER NOT NULL DEFAULT 0,
    manifest TEXT NOT NULL,
    created_by TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX builds_module_number ON builds (module_id, number);

CREATE TABLE assignments (
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    module_id INTEGER NOT NULL REFERENCES modules (id),
    build INTEGER,
    reason TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL,
    PRIMARY KEY (machine_id, module_id)
);
CREATE INDEX assignments_module ON assignments (module_id);

CREATE TABLE declarations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    digest TEXT NOT NULL,
    envelope BLOB NOT NULL,
    artifacts TEXT NOT NULL DEFAULT '',
    trigger TEXT NOT NULL DEFAULT '',
    composed_by TEXT NOT NULL DEFAULT '',
    composed_at DATETIME NOT NULL
);
CREATE UNIQUE INDEX declarations_machine_generation ON declarations (machine_id, generation);

CREATE TABLE sends (
    id TEXT PRIMARY KEY,
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    digest TEXT NOT NULL,
    instance_id TEXT NOT NULL,
    trigger TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL
);
CREATE INDEX sends_machine_created ON sends (machine_id, created_at);
CREATE INDEX sends_created ON sends (created_at);

CREATE TABLE reports (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    send_id TEXT NOT NULL DEFAULT '',
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    generation INTEGER NOT NULL,
    digest TEXT NOT NULL DEFAULT '',
    outcome TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    attempt INTEGER NOT NULL DEFAULT 0,
    host_version TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    body TEXT NOT NULL,
    created_at DATETIME NOT NULL
);
CREATE INDEX reports_send ON reports (send_id);
CREATE INDEX reports_machine_created ON reports (machine_id, created_at);

CREATE TABLE blobs (
    digest TEXT PRIMARY KEY,
    size INTEGER NOT NULL,
    data BLOB NOT NULL,
    created_at DATETIME NOT NULL
);

CREATE TABLE audit_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at DATETIME NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL DEFAULT '',
    detail TEXT NOT NULL DEFAULT ''
);
CREATE INDEX audit_events_at ON audit_events (at);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE blobs;
DROP TABLE reports;
DROP TABLE sends;
DROP TABLE declarations;
DROP TABLE assignments;
DROP TABLE builds;
DROP TABLE modules;
DROP TABLE machine_variables;
DROP TABLE machines;
DROP TABLE join_tokens;
DROP TABLE users;
DROP TABLE keys;
DROP TABLE instances;

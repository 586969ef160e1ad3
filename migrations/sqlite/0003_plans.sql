-- +goose Up
CREATE TABLE plans (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    module_id INTEGER NOT NULL REFERENCES modules (id),
    build INTEGER NOT NULL,
    state TEXT NOT NULL,
    reason TEXT NOT NULL DEFAULT '',
    tier INTEGER NOT NULL DEFAULT 0,
    created_by TEXT NOT NULL DEFAULT '',
    created_at DATETIME NOT NULL,
    finished_at DATETIME
);
CREATE INDEX plans_module ON plans (module_id);

CREATE TABLE plan_steps (
    plan_id INTEGER NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    tier INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    generation INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    PRIMARY KEY (plan_id, machine_id)
);

CREATE TABLE machine_targets (
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    module_id INTEGER NOT NULL REFERENCES modules (id),
    build INTEGER NOT NULL,
    plan_id INTEGER NOT NULL,
    PRIMARY KEY (machine_id, module_id)
);

-- +goose Down
DROP TABLE machine_targets;
DROP TABLE plan_steps;
DROP TABLE plans;

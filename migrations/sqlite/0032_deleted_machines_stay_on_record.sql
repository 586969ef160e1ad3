-- +goose Up
-- A machine deleted keeps its place in the plans and host rollouts that
-- reached it, under its name: their steps lost the foreign key that
-- deleted them with it (a plan's page lost the machines it had reached,
-- and a tier). SQLite drops a foreign key only by making the table again.
CREATE TABLE plan_steps_new (
    plan_id INTEGER NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    machine_id INTEGER NOT NULL,
    tier INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    generation INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    previous_build BIGINT NOT NULL DEFAULT 0,
    machine_name TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (plan_id, machine_id)
);
INSERT INTO plan_steps_new (plan_id, machine_id, tier, state, generation, reason, started_at, finished_at, previous_build)
    SELECT plan_id, machine_id, tier, state, generation, reason, started_at, finished_at, previous_build FROM plan_steps;
DROP TABLE plan_steps;
ALTER TABLE plan_steps_new RENAME TO plan_steps;

CREATE TABLE rollout_machines_new (
    rollout_id INTEGER NOT NULL REFERENCES rollouts (id) ON DELETE CASCADE,
    machine_id INTEGER NOT NULL,
    wave INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    previous TEXT NOT NULL DEFAULT '',
    reason TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    machine_name TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (rollout_id, machine_id)
);
INSERT INTO rollout_machines_new (rollout_id, machine_id, wave, state, previous, reason, started_at, finished_at)
    SELECT rollout_id, machine_id, wave, state, previous, reason, started_at, finished_at FROM rollout_machines;
DROP TABLE rollout_machines;
ALTER TABLE rollout_machines_new RENAME TO rollout_machines;

-- +goose Down
CREATE TABLE plan_steps_old (
    plan_id INTEGER NOT NULL REFERENCES plans (id) ON DELETE CASCADE,
    machine_id INTEGER NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    tier INTEGER NOT NULL,
    state TEXT NOT NULL DEFAULT 'pending',
    generation INTEGER NOT NULL DEFAULT 0,
    reason TEXT NOT NULL DEFAULT '',
    started_at DATETIME,
    finished_at DATETIME,
    previous_build BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (plan_id, machine_id)
);
INSERT INTO plan_steps_old (plan_id, machine_id, tier, state, generation, reason, started_at, finished_at, previous_build)
    SELECT plan_id, machine_id, tier, state, generation, reason, started_at, finished_at, previous_build FROM plan_steps
    WHERE machine_id IN (SELECT id FROM machines);
DROP TABLE plan_steps;
ALTER TABLE plan_steps_old RENAME TO plan_steps;

CREATE TABLE rollout_machines_old (
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
INSERT INTO rollout_machines_old (rollout_id, machine_id, wave, state, previous, reason, started_at, finished_at)
    SELECT rollout_id, machine_id, wave, state, previous, reason, started_at, finished_at FROM rollout_machines
    WHERE machine_id IN (SELECT id FROM machines);
DROP TABLE rollout_machines;
ALTER TABLE rollout_machines_old RENAME TO rollout_machines;

-- +goose Up
-- A machine deleted keeps its place in the plans and host rollouts that
-- reached it, under its name: their steps lost the foreign key that
-- deleted them with it (a plan's page lost the machines it had reached,
-- and a tier).
ALTER TABLE plan_steps DROP CONSTRAINT plan_steps_machine_id_fkey;
ALTER TABLE plan_steps ADD COLUMN machine_name TEXT NOT NULL DEFAULT '';
ALTER TABLE rollout_machines DROP CONSTRAINT rollout_machines_machine_id_fkey;
ALTER TABLE rollout_machines ADD COLUMN machine_name TEXT NOT NULL DEFAULT '';

-- +goose Down
DELETE FROM plan_steps WHERE machine_id NOT IN (SELECT id FROM machines);
DELETE FROM rollout_machines WHERE machine_id NOT IN (SELECT id FROM machines);
ALTER TABLE rollout_machines DROP COLUMN machine_name;
ALTER TABLE rollout_machines ADD CONSTRAINT rollout_machines_machine_id_fkey FOREIGN KEY (machine_id) REFERENCES machines (id) ON DELETE CASCADE;
ALTER TABLE plan_steps DROP COLUMN machine_name;
ALTER TABLE plan_steps ADD CONSTRAINT plan_steps_machine_id_fkey FOREIGN KEY (machine_id) REFERENCES machines (id) ON DELETE CASCADE;

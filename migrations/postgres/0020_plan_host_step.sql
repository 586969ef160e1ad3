-- +goose Up
-- A plan told to roll out a host release first (its host step): the
-- release, and on the rollout that carries it out, the plan it belongs to
-- (0: a rollout of the fleet). Such a rollout reaches only the plan's
-- machines that need it and leaves the fleet default as it is.
ALTER TABLE plans ADD COLUMN host_release TEXT NOT NULL DEFAULT '';
ALTER TABLE rollouts ADD COLUMN plan_id BIGINT NOT NULL DEFAULT 0;
CREATE INDEX rollouts_plan ON rollouts (plan_id);

-- +goose Down
DROP INDEX rollouts_plan;
ALTER TABLE rollouts DROP COLUMN plan_id;
ALTER TABLE plans DROP COLUMN host_release;

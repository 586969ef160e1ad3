-- +goose Up
-- Why a person made a build older than the module's current one current,
-- and the newest build it went back from: every machine that runs a build
-- newer than the current one and no newer than that (and is not pinned)
-- is moved back to it; a build newer still (reached since by a plan) is
-- kept, and without a reason a machine is never given a build older than
-- it runs. Both cleared once a build no older is made current.
ALTER TABLE modules ADD COLUMN current_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE modules ADD COLUMN current_back_from BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE modules DROP COLUMN current_back_from;
ALTER TABLE modules DROP COLUMN current_reason;

-- +goose Up
-- Why a person made a build older than the module's current one current:
-- with it, every machine that runs a newer build (and is not pinned) is
-- moved back to it; without one, a machine is never given a build older
-- than it runs. Empty again once a build no older is made current.
ALTER TABLE modules ADD COLUMN current_reason TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE modules DROP COLUMN current_reason;

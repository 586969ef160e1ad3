-- +goose Up
-- When a fleet rollout of the release's version finished with the
-- release's platform in it. The fleet default reaches a machine without a
-- target of its own only through a release so tried: one uploaded for
-- another platform after its version became the default would otherwise
-- reach every machine of that platform at its next generation, untried,
-- all at once, outside any rollout. Releases of the default version,
-- and of every version a fleet rollout finished done (the default goes
-- back to one when a release fails after its rollout), were rolled out
-- before this column.
ALTER TABLE host_releases ADD COLUMN rolled_out_at DATETIME NULL;
UPDATE host_releases SET rolled_out_at = created_at
 WHERE state = 'ready' AND (version = (SELECT value FROM settings WHERE key = 'host_default_version')
    OR version IN (SELECT version FROM rollouts WHERE state = 'done' AND plan_id = 0));

-- +goose Down
ALTER TABLE host_releases DROP COLUMN rolled_out_at;

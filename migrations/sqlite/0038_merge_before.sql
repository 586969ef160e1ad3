-- +goose Up
-- The commit a merge's push was made onto (its "before"; '' when the push
-- named none, such as a new branch's): a push delivered after a newer one
-- that was made onto its commit is older, and is not built as a newer build.
ALTER TABLE merges ADD COLUMN before_commit TEXT NOT NULL DEFAULT '';
-- Followed from a push to the merges made onto it, and from each of those
-- to the builds it queued.
CREATE INDEX merges_before_commit ON merges (before_commit);
CREATE INDEX builds_merge_id ON builds (merge_id);

-- +goose Down
DROP INDEX builds_merge_id;
DROP INDEX merges_before_commit;
ALTER TABLE merges DROP COLUMN before_commit;

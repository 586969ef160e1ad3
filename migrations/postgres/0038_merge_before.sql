-- +goose Up
-- The commit a merge's push was made onto (its "before"; '' when the push
-- named none, such as a new branch's): a push delivered after a newer one
-- that was made onto its commit is older, and is not built as a newer build.
ALTER TABLE merges ADD COLUMN before_commit TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE merges DROP COLUMN before_commit;

-- +goose Up
-- When a release failed on its platform (its first failure, whose words
-- are in failure): the state word "failed" is shown with when. Releases
-- that failed before this column have none (NULL), and say so.
ALTER TABLE host_releases ADD COLUMN failed_at TIMESTAMPTZ NULL;

-- +goose Down
ALTER TABLE host_releases DROP COLUMN failed_at;

-- +goose Up
-- The declaration schemas a host release decodes, canonical ("1,2"):
-- required of every release from now on (its upload, its builder's host
-- build). Releases stored before said nothing and were built before
-- schema 2 existed, so they decode schema 1.
ALTER TABLE host_releases ADD COLUMN schemas TEXT NOT NULL DEFAULT '1';

-- +goose Down
ALTER TABLE host_releases DROP COLUMN schemas;

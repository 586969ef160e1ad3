-- +goose Up
-- The launcher running the machine's host (`mesh-host launch`), as its
-- last report said ('' for a host run without one, or of a release that
-- does not say): the launcher follows a host release only once that has
-- won its trial, or refused to, and an operator reads which one runs.
ALTER TABLE machines ADD COLUMN launcher_version TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN launcher_version;

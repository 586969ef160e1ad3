-- +goose Up
-- Why the machine's generation could not be composed (a variable missing,
-- a build gone), and which generation that was: the overview says why a
-- machine is behind without reading the audit log.
ALTER TABLE machines ADD COLUMN compose_error TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN compose_error_generation BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE machines DROP COLUMN compose_error_generation;
ALTER TABLE machines DROP COLUMN compose_error;

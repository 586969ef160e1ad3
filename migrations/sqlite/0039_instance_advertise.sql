-- +goose Up
-- The names an instance was started to be reached under (--advertise, a
-- JSON list): a service certificate may name none of any instance's, not
-- only those of the instance that signs it.
ALTER TABLE instances ADD COLUMN advertise TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE instances DROP COLUMN advertise;

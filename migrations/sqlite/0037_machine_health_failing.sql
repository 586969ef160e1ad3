-- +goose Up
-- Each failing check of the machine and since when it has failed, as its
-- reports said (JSON, '' when none): the machine's health keeps one
-- check's "since", and a second check failing for minutes started again
-- from the report in which the first recovered.
ALTER TABLE machines ADD COLUMN health_failing TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN health_failing;

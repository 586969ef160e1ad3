-- +goose Up
-- How many times a plan has changed (its state, tier or reason): an act a
-- person decided on what they saw names it, and is refused once the plan
-- has moved since, so a repeated resume cannot answer a pause or halt
-- nobody saw.
ALTER TABLE plans ADD COLUMN moves BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE plans DROP COLUMN moves;

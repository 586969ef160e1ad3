-- +goose Up
-- Sends are found by time through their ids (UUIDv7: time-ordered), so
-- the index on created_at only cost every send row one more index
-- insert.
DROP INDEX sends_created;

-- +goose Down
CREATE INDEX sends_created ON sends (created_at);

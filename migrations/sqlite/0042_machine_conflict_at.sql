-- +goose Up
-- When the machine's latest conflict was found: a conflict's words say
-- when it was checked, as every state's do, so an admin tells one its host
-- said a minute ago from one said a day ago by a host gone since.
ALTER TABLE machines ADD COLUMN conflict_at DATETIME;

-- +goose Down
ALTER TABLE machines DROP COLUMN conflict_at;

-- +goose Up
-- The send the machine's last outcome was reported of: a report of the
-- generation the machine finished is judged by its send against it, so a
-- copy of an earlier send's report committed late (a retry after a
-- timeout) is not taken as the host's latest word.
ALTER TABLE machines ADD COLUMN last_outcome_send TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN last_outcome_send;

-- +goose Up
-- The store schema each instance's build knows. An instance of a build
-- from before this column leaves it 0: while such an instance serves
-- (a rolling upgrade), the others sign every declaration's single-
-- signature envelope when they compose it, because that build sends the
-- envelope column as it is and knows nothing of batch envelopes.
ALTER TABLE instances ADD COLUMN store_schema BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE instances DROP COLUMN store_schema;

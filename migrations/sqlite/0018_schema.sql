-- +goose Up
-- The declaration schema a declaration was composed in, and so sent in: a
-- host is never sent a schema its poll did not advertise, and the record
-- says which one each send carried.
ALTER TABLE declarations ADD COLUMN schema INTEGER NOT NULL DEFAULT 1;
ALTER TABLE sends ADD COLUMN schema INTEGER NOT NULL DEFAULT 1;
-- Why a declaration was composed from held-back content (its host decodes
-- no schema that expresses the desired content), on the declaration and on
-- its machine, whose state is then behind with this reason.
ALTER TABLE declarations ADD COLUMN held_back TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN held_back TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE machines DROP COLUMN held_back;
ALTER TABLE declarations DROP COLUMN held_back;
ALTER TABLE sends DROP COLUMN schema;
ALTER TABLE declarations DROP COLUMN schema;

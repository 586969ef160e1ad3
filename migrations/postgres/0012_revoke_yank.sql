-- +goose Up
-- A join token an admin revoked is refused at enrolment like a used one.
ALTER TABLE join_tokens ADD COLUMN revoked_at TIMESTAMPTZ;
ALTER TABLE join_tokens ADD COLUMN revoked_by TEXT NOT NULL DEFAULT '';
-- A yanked build (state 'yanked') keeps running where it runs but is never
-- planned, pinned or made current again; the reason is shown with it.
ALTER TABLE builds ADD COLUMN yank_reason TEXT NOT NULL DEFAULT '';
ALTER TABLE builds ADD COLUMN yanked_by TEXT NOT NULL DEFAULT '';
ALTER TABLE builds ADD COLUMN yanked_at TIMESTAMPTZ;

-- +goose Down
ALTER TABLE builds DROP COLUMN yanked_at;
ALTER TABLE builds DROP COLUMN yanked_by;
ALTER TABLE builds DROP COLUMN yank_reason;
ALTER TABLE join_tokens DROP COLUMN revoked_by;
ALTER TABLE join_tokens DROP COLUMN revoked_at;

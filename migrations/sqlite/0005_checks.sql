-- +goose Up
-- Whether the checks of the machine's last applied report all passed
-- (true when nothing was checked): a plan's tier waits for healthy.
ALTER TABLE machines ADD COLUMN last_checks_ok BOOLEAN NOT NULL DEFAULT TRUE;

-- +goose Down
ALTER TABLE machines DROP COLUMN last_checks_ok;

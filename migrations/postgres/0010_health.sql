-- +goose Up
-- Health is a fact with a time: passing, failing (which check, what it
-- said, since when) or none (no checks declared); the state unhealthy is
-- read from it. A tier of a plan has a deadline; a plan step remembers the
-- build its machine ran before, so a halted plan can be rolled back; a pin
-- a rollback set names its plan, so a newer plan lifts it.
ALTER TABLE machines ADD COLUMN health TEXT NOT NULL DEFAULT 'none';
ALTER TABLE machines ADD COLUMN health_check TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN health_detail TEXT NOT NULL DEFAULT '';
ALTER TABLE machines ADD COLUMN health_since TIMESTAMPTZ;
-- last_checks_ok said only "the last apply's checks passed", with no time
-- and nothing between applies; health replaces it.
ALTER TABLE machines DROP COLUMN last_checks_ok;
ALTER TABLE machines ADD COLUMN health_at TIMESTAMPTZ;
ALTER TABLE modules ADD COLUMN tier_deadline_seconds BIGINT NOT NULL DEFAULT 600;
ALTER TABLE modules ADD COLUMN on_failure TEXT NOT NULL DEFAULT 'halt';
ALTER TABLE plan_steps ADD COLUMN previous_build BIGINT NOT NULL DEFAULT 0;
ALTER TABLE assignments ADD COLUMN pin_plan BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE assignments DROP COLUMN pin_plan;
ALTER TABLE plan_steps DROP COLUMN previous_build;
ALTER TABLE modules DROP COLUMN on_failure;
ALTER TABLE modules DROP COLUMN tier_deadline_seconds;
ALTER TABLE machines DROP COLUMN health_at;
ALTER TABLE machines ADD COLUMN last_checks_ok BOOLEAN NOT NULL DEFAULT TRUE;
ALTER TABLE machines DROP COLUMN health_since;
ALTER TABLE machines DROP COLUMN health_detail;
ALTER TABLE machines DROP COLUMN health_check;
ALTER TABLE machines DROP COLUMN health;

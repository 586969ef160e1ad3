-- +goose Up
-- When a machine's last outcome was reported, and for which generation:
-- last_report_at moves with every report (a check, a renewal), so a state
-- that speaks of the outcome (refused, failed, rejected, rolled back,
-- applied) says since when from these, and a plan's step fails only for
-- a failure of its own generation or a later one, never an older one's
-- retry. Machines keep what they had: the outcome as of their last report.
ALTER TABLE machines ADD COLUMN last_outcome_at DATETIME;
ALTER TABLE machines ADD COLUMN last_outcome_generation BIGINT NOT NULL DEFAULT 0;
UPDATE machines SET last_outcome_at = last_report_at, last_outcome_generation = finished_generation WHERE last_outcome <> '';

-- +goose Down
ALTER TABLE machines DROP COLUMN last_outcome_generation;
ALTER TABLE machines DROP COLUMN last_outcome_at;

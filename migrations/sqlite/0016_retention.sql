-- +goose Up
-- Sends, reports and declarations do not grow without bound (see the
-- PostgreSQL migration of the same number). SQLite has no partitions: old
-- rows are deleted in small batches by a worker, so the epoch stays 0 here
-- and the table of epochs has its one row; both exist so that the two
-- dialects keep the same tables and columns.
CREATE TABLE retention_epochs (
    epoch INTEGER PRIMARY KEY,
    started_at DATETIME NOT NULL
);
INSERT INTO retention_epochs (epoch, started_at) VALUES (0, CURRENT_TIMESTAMP);
ALTER TABLE declarations ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE sends ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;
ALTER TABLE reports ADD COLUMN epoch INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE reports DROP COLUMN epoch;
ALTER TABLE sends DROP COLUMN epoch;
ALTER TABLE declarations DROP COLUMN epoch;
DROP TABLE retention_epochs;

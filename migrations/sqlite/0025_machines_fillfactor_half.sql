-- +goose Up
-- PostgreSQL leaves half of each page of the machines table free for a
-- bump's in-place updates (0025 there); SQLite has no such setting. Kept
-- so both dialects number their migrations alike.
SELECT 1;

-- +goose Down
SELECT 1;

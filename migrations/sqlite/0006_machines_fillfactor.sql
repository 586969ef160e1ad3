-- +goose Up
-- PostgreSQL leaves room on the machines table's pages for in-place
-- updates (0006 there); SQLite has no such setting. Kept so both dialects
-- number their migrations alike.
SELECT 1;

-- +goose Down
SELECT 1;

-- +goose Up
-- The addresses a source's webhooks may come from (IPs and CIDR prefixes,
-- comma-separated; empty: any). A delivery from elsewhere is refused before
-- its body is read, so an outsider cannot hold the webhooks' body bound.
ALTER TABLE sources ADD COLUMN allowed_from TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE sources DROP COLUMN allowed_from;

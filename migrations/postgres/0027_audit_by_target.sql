-- +goose Up
-- An operator asks what happened to one thing (GET /api/v1/audit?target=
-- machine/m1, meshctl audit --machine m1): its events, newest first, by
-- this index rather than by reading the whole log.
CREATE INDEX audit_events_target ON audit_events (target, id);

-- +goose Down
DROP INDEX audit_events_target;

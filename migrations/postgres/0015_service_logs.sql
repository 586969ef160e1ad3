-- +goose Up
-- The latest lines a host shipped of each of its services (a report
-- carries them when a service failed, restarted or turned unhealthy): one
-- row per (machine, resource), overwritten by the next shipment; the
-- report that carried them keeps its own copy in its body.
CREATE TABLE service_logs (
    machine_id BIGINT NOT NULL REFERENCES machines (id) ON DELETE CASCADE,
    resource TEXT NOT NULL,
    why TEXT NOT NULL,
    lines TEXT NOT NULL,
    truncated BOOLEAN NOT NULL DEFAULT FALSE,
    report_id BIGINT NOT NULL,
    send TEXT NOT NULL DEFAULT '',
    generation BIGINT NOT NULL DEFAULT 0,
    shipped_at TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (machine_id, resource)
);

-- +goose Down
DROP TABLE service_logs;

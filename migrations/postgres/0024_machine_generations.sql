-- +goose Up
-- The last generation of each deleted machine, by name: a machine enrolled
-- again under a name starts past it, so its host (whose state holds the
-- earlier machine's finished generation) is sent the new machine's
-- declarations, and every declaration of the earlier machine stays older
-- than what the host will be sent.
CREATE TABLE machine_generations (
    name TEXT PRIMARY KEY,
    generation BIGINT NOT NULL
);

-- +goose Down
DROP TABLE machine_generations;

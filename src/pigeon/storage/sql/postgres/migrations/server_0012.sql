-- Lifecycle events counted (twin of sqlite/migrations/server_0012.sql; pigeon.lifecycle):
-- a worker recycled by its supervisor, the outbox relay taking over the relay lock, a
-- `pigeon serve --workers N` worker replaced. In the database, not in a process's memory,
-- so that /metrics (read from the database at each scrape) shows every process's and
-- node's events, the same on every node.

-- One row per kind: a count that only grows (a Prometheus counter), with the last
-- event's time and where it happened (host, process). A few rows at most: nothing to purge.
CREATE TABLE pigeon_lifecycle_events (
    kind         text PRIMARY KEY,
    count        bigint NOT NULL,
    last_at      double precision NOT NULL,
    last_detail  text NOT NULL
);

-- Conflict resolution on the server: the PostgreSQL twin of sqlite/migrations/server_0003.sql.

CREATE TABLE resources (
    principal  text NOT NULL,
    collection text NOT NULL,
    id         text NOT NULL,
    version    integer NOT NULL,
    data       text NOT NULL,
    deleted    integer NOT NULL DEFAULT 0,
    clock      text NOT NULL,
    raw_clock  text NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    PRIMARY KEY (principal, collection, id)
);

CREATE TABLE write_outcomes (
    seq             bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    principal       text NOT NULL,
    collection      text NOT NULL,
    id              text NOT NULL,
    idempotency_key text NOT NULL,
    operation_id    text NOT NULL,
    outcome         text NOT NULL CHECK (outcome IN ('won', 'lost', 'merged')),
    clock           text NOT NULL,
    raw_clock       text NOT NULL,
    other_clock     text,
    version         integer NOT NULL,
    payload         text NOT NULL,
    recorded_at     double precision NOT NULL
);

CREATE INDEX write_outcomes_resource ON write_outcomes (principal, collection, id, seq);

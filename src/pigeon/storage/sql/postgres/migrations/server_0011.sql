-- The operations page's browser sessions and its sign-in limiter (twin of
-- sqlite/migrations/server_0011.sql; pigeon.ops.session, pigeon.ops.signin_limit): in the
-- database, so every process and node of the server sees the same sessions and the same
-- failed attempts.

-- One row per signed-in browser. The cookie holds a random id; only its SHA-256 is kept, so
-- a copy of the database opens no session. ``credential``: the fingerprint of the operator
-- credential it was made under (a session made under another one is refused and deleted).
CREATE TABLE pigeon_ops_sessions (
    id_hash     text PRIMARY KEY,
    credential  text NOT NULL,
    name        text NOT NULL,
    created_at  double precision NOT NULL,
    seen_at     double precision NOT NULL,
    expires_at  double precision NOT NULL
);

-- Failed sign-ins per client (an address, an IPv6 /64) and for all clients at once ('*'):
-- after a few, each further attempt waits out a delay that doubles up to a cap.
CREATE TABLE pigeon_ops_signin_failures (
    client         text PRIMARY KEY,
    failures       integer NOT NULL,
    last_at        double precision NOT NULL,
    blocked_until  double precision NOT NULL
);
CREATE INDEX pigeon_ops_signin_failures_last ON pigeon_ops_signin_failures (last_at);

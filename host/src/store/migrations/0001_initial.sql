-- The node's whole state in three tables, plus the fleet bus.

-- Every collection's entries: the value as canonical JSON text (keys sorted,
-- no spaces; bytea, not jsonb, since jsonb refuses a string holding U+0000 and
-- compares numbers unlike the node), the expiry in Unix ms by the node's clock
-- (null: never). Expired rows read as absent at once; the sweep deletes them
-- through the partial index.
CREATE TABLE entries (
    collection    text   NOT NULL,
    key           bytea  NOT NULL,
    value         bytea  NOT NULL,
    expires_at_ms bigint,
    PRIMARY KEY (collection, key)
);
CREATE INDEX entries_expiry ON entries (expires_at_ms) WHERE expires_at_ms IS NOT NULL;

-- Conversation and session histories: each entry byte-exact as the node
-- serialized it, so page byte caps count what sled counts.
CREATE TABLE history (
    id    text    NOT NULL,
    seq   bigint  NOT NULL,
    entry bytea   NOT NULL,
    size  integer NOT NULL,
    PRIMARY KEY (id, seq)
);

-- One row per history: the next sequence number and the quota counters,
-- updated in the same statement as each append.
CREATE TABLE history_meta (
    id      text   PRIMARY KEY,
    next    bigint NOT NULL,
    entries bigint NOT NULL,
    bytes   bigint NOT NULL
);

-- Messages between the nodes: NOTIFY carries only the id (its payload is
-- capped at 8000 bytes), the listener reads the row. Swept after 60 s.
CREATE TABLE fleet_messages (
    id         bigserial   PRIMARY KEY,
    origin     uuid        NOT NULL,
    topic      text        NOT NULL,
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fleet_messages_created ON fleet_messages (created_at);

-- The fleet's plugin set: which file each plugin is, by content; every node
-- mirrors it into its own plugins folder (host/src/runtime/fleet_plugins.rs).

-- Each distinct plugin content once, by its SHA-256 (hex). A row goes when no
-- published file names it any more, in the statement that stopped naming it.
CREATE TABLE plugin_blobs (
    sha256 text  PRIMARY KEY,
    bytes  bytea NOT NULL
);

-- The published files: one row per file name in the plugins folder.
CREATE TABLE plugin_set (
    file            text   PRIMARY KEY,
    sha256          text   NOT NULL REFERENCES plugin_blobs (sha256),
    size            bigint NOT NULL,
    published_at_ms bigint NOT NULL,
    published_by    text   NOT NULL
);

-- One row once the set exists: the first node to start on this database
-- seeds it from its folder; from then on the set, not a folder, is the truth.
CREATE TABLE plugin_set_seeded (
    one       boolean PRIMARY KEY DEFAULT true CHECK (one),
    seeded_by text    NOT NULL,
    at_ms     bigint  NOT NULL
);

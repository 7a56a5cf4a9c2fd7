//! The CS schema in PostgreSQL, step by step (see [`crate::pg::Pg::migrate`]).

use crate::pg::Migration;

/// The CS schema, step by step (never edit a step once released: add one).
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "confirmation server tables",
        sql: "
CREATE TABLE cs_entries (
    id text PRIMARY KEY,
    created bigint NOT NULL,
    body text NOT NULL);
CREATE INDEX cs_entries_created ON cs_entries (created);
CREATE TABLE cs_records (
    origin text NOT NULL,
    nonce text NOT NULL,
    id text NOT NULL UNIQUE,
    user_name text NOT NULL,
    resource_uri text NOT NULL,
    decided_at bigint NOT NULL,
    pending boolean NOT NULL,
    next_try bigint,
    sealed boolean NOT NULL,
    body text NOT NULL,
    PRIMARY KEY (origin, nonce));
CREATE INDEX cs_records_resource ON cs_records (resource_uri, decided_at DESC);
CREATE INDEX cs_records_user ON cs_records (user_name, decided_at DESC, id);
CREATE INDEX cs_records_due ON cs_records (next_try) WHERE pending;
CREATE INDEX cs_records_sealed ON cs_records (decided_at) WHERE sealed;
CREATE TABLE cs_accounts (
    username text PRIMARY KEY,
    username_fold text NOT NULL,
    email_fold text,
    body text NOT NULL);
CREATE UNIQUE INDEX cs_accounts_email ON cs_accounts (email_fold);
CREATE INDEX cs_accounts_username_fold ON cs_accounts (username_fold);
CREATE TABLE cs_sessions (
    key bytea PRIMARY KEY,
    expires bigint NOT NULL,
    body text NOT NULL);
CREATE INDEX cs_sessions_expires ON cs_sessions (expires);
CREATE TABLE cs_limits (
    key bytea PRIMARY KEY,
    last_failure bigint NOT NULL,
    locked_until bigint NOT NULL,
    body text NOT NULL);
",
    },
    // A decision's document in its own column: a lease or the end
    // of a delivery rewrites `body`, and the document, stored out of line by
    // TOAST, is then kept as it is rather than written again. NULL: the
    // document is in `body` (rows written before).
    Migration {
        version: 2,
        name: "decision documents apart from the record",
        sql: "ALTER TABLE cs_records ADD COLUMN document text;",
    },
    // One unique key for a record, not two: its id is the SHA-256
    // of (origin, nonce), unique already, so the primary key on (origin,
    // nonce) was a second index over the same key, written at every insert
    // and every update. Every statement now finds a record by its id (and
    // checks the origin and nonce of the row it found).
    Migration {
        version: 3,
        name: "decision records keyed by their id alone",
        sql: "
ALTER TABLE cs_records DROP CONSTRAINT cs_records_pkey;
ALTER TABLE cs_records ADD CONSTRAINT cs_records_pkey PRIMARY KEY (id);
ALTER TABLE cs_records DROP CONSTRAINT cs_records_id_key;
",
    },
    // Documents packed: about 700 bytes where PostgreSQL's own
    // compression left 1,535 of the demo's 2,075, small enough to stay in
    // the row (no TOAST chunk, no entry in its index). Stored as it is
    // (`EXTERNAL`: never compressed again; out of line only in a row over
    // PostgreSQL's 2 KB threshold). The text column stays for rows written
    // before, and is emptied when such a row is next written.
    Migration {
        version: 4,
        name: "decision documents packed",
        sql: "
ALTER TABLE cs_records ADD COLUMN packed bytea;
ALTER TABLE cs_records ALTER COLUMN packed SET STORAGE EXTERNAL;
",
    },
    // Old history collected (`history_days`): records are written in the
    // order of their decision time, so a block-range index finds the old
    // ones at almost no cost to each insert; the ids of those collected stay,
    // so that a claim of one is refused (§6).
    Migration {
        version: 5,
        name: "old history collected",
        sql: "
CREATE INDEX cs_records_decided ON cs_records USING brin (decided_at);
CREATE TABLE cs_collected (
    id text PRIMARY KEY,
    decided_at bigint NOT NULL);
",
    },
    // Passkeys: a sign-in with one finds its account by the WebAuthn user
    // handle kept in the account's body.
    Migration {
        version: 6,
        name: "accounts found by their passkeys' user handle",
        sql: "
CREATE UNIQUE INDEX cs_accounts_user_handle ON cs_accounts ((body::jsonb ->> 'user_handle'));
",
    },
    // The transparency log (§15): entries queued with the writes that
    // make them, sequenced by whichever instance takes the head row's lock.
    Migration {
        version: 7,
        name: "transparency log",
        sql: "
CREATE TABLE tlog_queue (
    id bigserial PRIMARY KEY,
    entry bytea NOT NULL);
CREATE TABLE tlog_entries (
    idx bigint PRIMARY KEY,
    entry bytea NOT NULL);
CREATE TABLE tlog_hashes (
    idx bigint PRIMARY KEY,
    hash bytea NOT NULL);
CREATE TABLE tlog_index (
    leaf bytea PRIMARY KEY,
    idx bigint NOT NULL);
CREATE TABLE tlog_head (
    id integer PRIMARY KEY CHECK (id = 1),
    vkey text NOT NULL,
    size bigint,
    root bytea,
    checkpoint bytea);
",
    },
    // Resource servers registered without a restart (§16.3), the
    // operator's initial access tokens (digests), and the generation every
    // instance polls to notice a change.
    Migration {
        version: 8,
        name: "registered resource servers",
        sql: "
CREATE TABLE cs_registrations (
    origin text PRIMARY KEY,
    name text NOT NULL,
    resource_prefix text NOT NULL,
    jwks_uri text NOT NULL,
    token_endpoint text NOT NULL,
    status text NOT NULL CHECK (status IN ('active', 'blocked')),
    registered_at bigint NOT NULL,
    updated_at bigint NOT NULL);
CREATE TABLE cs_registration_tokens (
    digest text PRIMARY KEY,
    created bigint NOT NULL);
CREATE TABLE cs_registration_generation (
    id integer PRIMARY KEY CHECK (id = 1),
    n bigint NOT NULL);
INSERT INTO cs_registration_generation (id, n) VALUES (1, 0);
",
    },
];

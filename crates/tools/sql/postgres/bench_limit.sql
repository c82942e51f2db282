-- The machine's limit for the benchmark's commit pattern: pgbench runs a script doing
-- the same commits and row writes per message as sbworker does with one message per
-- transaction (an attempt counted and committed on its own; then in one transaction
-- the message taken off its queue, its group's row moved on, a reply written, the
-- attempt forgotten), on the plainest tables that can hold them. Installed into the
-- bench's own database for pgbench.

CREATE TABLE IF NOT EXISTS limit_q (
    id   bigserial PRIMARY KEY,
    grp  int NOT NULL,
    seq  int NOT NULL
);
CREATE TABLE IF NOT EXISTS limit_attempt (
    id bigint PRIMARY KEY,
    n  int NOT NULL
);
CREATE TABLE IF NOT EXISTS limit_account (
    grp      int PRIMARY KEY,
    applied  bigint NOT NULL DEFAULT 0,
    last_seq bigint NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS limit_reply (
    grp        int NOT NULL,
    seq        int NOT NULL,
    handled_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
-- The commit calibration: one row per commit.
CREATE TABLE IF NOT EXISTS calibration (
    id bigserial PRIMARY KEY
);

-- The pipeline's limit (bench_pipeline_limit.pgbench): per roster edit the minimal
-- durable work of the three transactions of the pipeline, on the plainest tables that
-- can hold them. The bodies are the contract's example Vraag and Antwoord, so that the
-- rows weigh (and TOAST compresses) as the real ones do.
CREATE TABLE IF NOT EXISTS plimit_body (
    kind text PRIMARY KEY,
    body text NOT NULL
);
CREATE TABLE IF NOT EXISTS plimit_roster (
    dv      int PRIMARY KEY,
    versie  bigint NOT NULL DEFAULT 0,
    minuten int NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS plimit_request (
    id     bigserial PRIMARY KEY,
    dv     int NOT NULL,
    versie bigint NOT NULL,
    body   text NOT NULL
);
CREATE TABLE IF NOT EXISTS plimit_answer (
    id     bigserial PRIMARY KEY,
    dv     int NOT NULL,
    versie bigint NOT NULL,
    body   text NOT NULL
);
CREATE TABLE IF NOT EXISTS plimit_result (
    dv     int PRIMARY KEY,
    versie bigint NOT NULL,
    body   text NOT NULL
);

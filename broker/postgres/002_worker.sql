-- sbworker PostgreSQL broker, version 2: the worker's own bookkeeping.
--
-- Idempotent, like 001. Schema "sbworker" holds what the worker keeps beside the
-- broker: how often each message has been attempted, and the messages it set aside.

CREATE SCHEMA IF NOT EXISTS sbworker;

-- Attempts per message, keyed as Service Broker identifies a received message: the
-- receiving conversation handle and the message's sequence number in it. A row is
-- written (and committed) by the worker *before* its handler runs, on a connection
-- outside the receiving transaction, so the count survives both a rollback and a crash
-- of the worker. The receiving transaction deletes the row when it commits.
--
-- What an attempt died of decides whether it counts toward diversion:
--   attempts            attempts that count: begun, and not found to be the
--                       environment's fault. An attempt whose worker died (kill -9, a
--                       crash, out of memory) leaves its count standing.
--   failures            of those, the ones that failed by the message's fault (the
--                       handler's error, a Fout that could not be sent, ...), with
--                       last_error the latest such error. attempts - 1 - failures of
--                       the attempts before the current one ended with the worker.
--   transient_failures  attempts that failed by the environment's fault (deadlock,
--                       lock timeout, serialization failure, a dropped connection, a
--                       server shutting down): their count is given back
--                       (attempts - 1), so they never move a message toward diversion;
--                       last_transient_error is the latest.
CREATE TABLE IF NOT EXISTS sbworker.message_attempt (
    conversation_handle     uuid NOT NULL,
    message_sequence_number bigint NOT NULL,
    queue                   text NOT NULL,
    attempts                int NOT NULL,
    last_error              text,
    first_attempt_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_attempt_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (conversation_handle, message_sequence_number)
);
-- (Indexes and columns only when missing: see 001_broker.sql.)
DO $$
DECLARE
    v_has name[] := ARRAY(SELECT attname FROM pg_catalog.pg_attribute
                           WHERE attrelid = 'sbworker.message_attempt'::regclass AND NOT attisdropped);
BEGIN
    IF NOT 'failures' = ANY (v_has) THEN
        ALTER TABLE sbworker.message_attempt ADD COLUMN IF NOT EXISTS failures int NOT NULL DEFAULT 0;
    END IF;
    IF NOT 'transient_failures' = ANY (v_has) THEN
        ALTER TABLE sbworker.message_attempt ADD COLUMN IF NOT EXISTS transient_failures int NOT NULL DEFAULT 0;
    END IF;
    IF NOT 'last_transient_error' = ANY (v_has) THEN
        ALTER TABLE sbworker.message_attempt ADD COLUMN IF NOT EXISTS last_transient_error text;
    END IF;
END $$;

-- Messages the worker diverted after too many failed attempts, with the reason. The
-- conversation was answered with a Fout (where the contract allows one) and ended with
-- an error; the message itself is kept here, byte for byte.
CREATE TABLE IF NOT EXISTS sbworker.dead_letter (
    id                      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue                   text NOT NULL,
    service_name            text NOT NULL,
    service_contract_name   text NOT NULL,
    conversation_group_id   uuid NOT NULL,
    conversation_handle     uuid NOT NULL,
    message_sequence_number bigint NOT NULL,
    message_type_name       text NOT NULL,
    message_body            bytea,
    attempts                int NOT NULL,
    reason                  text NOT NULL,
    dead_lettered_at        timestamptz NOT NULL DEFAULT clock_timestamp()
);
DO $$
BEGIN
    IF pg_catalog.to_regclass('sbworker.dead_letter_at') IS NULL THEN
        CREATE INDEX IF NOT EXISTS dead_letter_at ON sbworker.dead_letter (dead_lettered_at);
    END IF;
END $$;

-- What was installed, by part (broker, roster): this sbworker's version and a hash of
-- the part's scripts, written by `sbworker install`; `sbworker selftest` compares it
-- with its own.
CREATE TABLE IF NOT EXISTS sbworker.installation (
    part         text PRIMARY KEY,
    stamp        text NOT NULL,
    installed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);

INSERT INTO sb.migration (version) VALUES (2) ON CONFLICT DO NOTHING;

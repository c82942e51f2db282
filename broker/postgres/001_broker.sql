-- sbworker PostgreSQL broker, version 1: Service Broker semantics in SQL.
--
-- Idempotent: running this script again changes nothing (IF NOT EXISTS, CREATE OR
-- REPLACE). Everything lives in schema "sb". Installed by `sbworker install --postgres
-- URL` and by the tests.
--
-- Errors raised for the caller carry SQLSTATEs of class "SB" whose digits are the SQL
-- Server error number they stand for (SB617 = 9617 queue disabled, SB426 = 8426
-- conversation not found, ...); the transport maps them back.

CREATE SCHEMA IF NOT EXISTS sb;

CREATE TABLE IF NOT EXISTS sb.migration (
    version    int PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
);

-- Indexes, columns, triggers and views are made only when the catalog says they are
-- missing or different: CREATE INDEX IF NOT EXISTS locks the table against its writers
-- before it looks, ADD COLUMN IF NOT EXISTS against everyone, and replacing a trigger or
-- a view locks too. An install runs over the live system, whose sends, receives and
-- planners would otherwise wait for those locks at every install, until it commits.

-- This database's broker: its id (a route names the far database by it, as SQL Server's
-- service_broker_guid does; a new one at sb.new_broker) and the side it holds: 'both'
-- (one database holds both services, the default), or, split over two databases
-- (docs/deployment.md), 'roster' (the roster, the sender, the answers' service and
-- queue, the results) or 'calc' (the calculation service and its queue). The side is
-- the first install's (`sbworker install --side`, setting sbworker.side) and stays.
CREATE TABLE IF NOT EXISTS sb.broker_instance (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    id       uuid NOT NULL DEFAULT gen_random_uuid(),
    side     text NOT NULL CHECK (side IN ('both', 'roster', 'calc'))
);
DO $$
DECLARE
    v_asked text := nullif(current_setting('sbworker.side', true), '');
    v_side  text;
BEGIN
    SELECT side INTO v_side FROM sb.broker_instance;
    IF NOT FOUND THEN
        INSERT INTO sb.broker_instance (side) VALUES (coalesce(v_asked, 'both'));
    ELSIF v_asked IS NOT NULL AND v_asked <> v_side THEN
        RAISE EXCEPTION 'this database holds the % side of sbworker; it cannot be installed as the % side', v_side, v_asked
              USING ERRCODE = '22023',
                    HINT = 'install each side in a database of its own (docs/deployment.md)';
    END IF;
END $$;

CREATE OR REPLACE FUNCTION sb.side() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT side FROM sb.broker_instance
$$;

-- Catalogue -----------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS sb.message_type (
    name       text PRIMARY KEY,
    validation text NOT NULL DEFAULT 'NONE'
               CHECK (validation IN ('NONE', 'EMPTY', 'WELL_FORMED_XML'))
);

CREATE TABLE IF NOT EXISTS sb.contract (
    name text PRIMARY KEY
);

CREATE TABLE IF NOT EXISTS sb.contract_message (
    contract     text NOT NULL REFERENCES sb.contract ON DELETE CASCADE,
    message_type text NOT NULL REFERENCES sb.message_type,
    sent_by      text NOT NULL CHECK (sent_by IN ('INITIATOR', 'TARGET', 'ANY')),
    PRIMARY KEY (contract, message_type)
);

CREATE TABLE IF NOT EXISTS sb.queue (
    id              serial UNIQUE,
    name            text PRIMARY KEY,
    enabled         boolean NOT NULL DEFAULT true,
    poison_handling boolean NOT NULL DEFAULT true,
    -- The most readers on the queue across every worker process and host, like
    -- MAX_QUEUE_READERS; 0: no limit (sb.queue_max_readers).
    max_readers     int NOT NULL DEFAULT 0 CHECK (max_readers >= 0)
);
-- Until this release max_readers was advice no worker read, 1 by default; it is the
-- database's limit now. Queues left at the old default get no limit, once (before
-- marker 1001 is recorded, at the end of this script; markers above 1000 record one-time
-- changes of data, the ones below the scripts applied).
-- Only then: an ALTER TABLE takes sb.queue's strongest lock, which every send waits for,
-- and an install runs while planners edit.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sb.migration WHERE version = 1001) THEN
        ALTER TABLE sb.queue ALTER COLUMN max_readers SET DEFAULT 0;
        UPDATE sb.queue SET max_readers = 0 WHERE max_readers = 1;
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS sb.service (
    name  text PRIMARY KEY,
    queue text NOT NULL REFERENCES sb.queue
);

CREATE TABLE IF NOT EXISTS sb.service_contract (
    service  text NOT NULL REFERENCES sb.service ON DELETE CASCADE,
    contract text NOT NULL REFERENCES sb.contract,
    PRIMARY KEY (service, contract)
);

-- The system message types every contract allows (Service Broker's own).
INSERT INTO sb.message_type (name, validation) VALUES
    ('http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog', 'EMPTY'),
    ('http://schemas.microsoft.com/SQL/ServiceBroker/Error', 'WELL_FORMED_XML'),
    ('http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer', 'EMPTY')
ON CONFLICT (name) DO NOTHING;

-- Conversations ---------------------------------------------------------------------

-- A conversation group is local to one side: it belongs to one queue.
CREATE TABLE IF NOT EXISTS sb.conversation_group (
    id    uuid PRIMARY KEY,
    queue text NOT NULL REFERENCES sb.queue
);

-- One row per side of a dialog. States as sys.conversation_endpoints: SO, SI, CO, DI,
-- DO, ER, CD. No foreign keys: BEGIN DIALOG and the first SEND check the service and
-- the contract they write, no service or contract is ever deleted, and a group's row is
-- held (sb.hold_group) by whoever adds an endpoint to it and deleted only when nothing
-- uses it (sb.drop_unused_groups). Their checks cost every endpoint written, and every
-- update of one written in the same transaction (PostgreSQL checks those again): about
-- 8 statements per request (docs/postgresql.md, "Hot paths"). Installs from before drop
-- them, once.
CREATE TABLE IF NOT EXISTS sb.endpoint (
    handle          uuid PRIMARY KEY,
    conversation_id uuid NOT NULL,
    is_initiator    boolean NOT NULL,
    service         text NOT NULL,
    far_service     text NOT NULL,
    contract        text NOT NULL,
    group_id        uuid NOT NULL,
    far_handle      uuid,
    state           text NOT NULL CHECK (state IN ('SO', 'SI', 'CO', 'DI', 'DO', 'ER', 'CD')),
    send_seq        bigint NOT NULL DEFAULT 0,
    expires_at      timestamptz,
    created_at      timestamptz NOT NULL DEFAULT now()
) WITH (fillfactor = 80);
DO $$
BEGIN
    IF pg_catalog.to_regclass('sb.endpoint_group') IS NULL THEN
        CREATE INDEX IF NOT EXISTS endpoint_group ON sb.endpoint (group_id);
    END IF;
END $$;
-- A dialog whose far service lives in another database: the route (sb.route,
-- 008_routes.sql) its messages leave by; NULL when both sides are here. The far service
-- then has no row in sb.service, so far_service names no row. Added once: an ALTER
-- TABLE takes the table every send and receive reads.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'sb.endpoint'::regclass AND attname = 'route' AND NOT attisdropped) THEN
        ALTER TABLE sb.endpoint ADD COLUMN route text;
    END IF;
END $$;
DO $$
DECLARE
    v_fk name;
BEGIN
    FOR v_fk IN SELECT conname FROM pg_catalog.pg_constraint
                 WHERE conrelid = 'sb.endpoint'::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE sb.endpoint DROP CONSTRAINT %I', v_fk);
    END LOOP;
END $$;

-- Messages waiting on a queue. Delivered messages are deleted (RETENTION OFF): the
-- table only ever holds the backlog. Vacuumed eagerly: dead rows at the head of a
-- DELETE-heavy queue are what slows such queues down.
-- One index: the key is (group_id, id), the order in which a group's messages are read;
-- every reader of messages knows their group (a message's group is always its receiving
-- endpoint's). An id alone is unique by its sequence.
CREATE SEQUENCE IF NOT EXISTS sb.message_id;
CREATE TABLE IF NOT EXISTS sb.message (
    id           bigint NOT NULL DEFAULT nextval('sb.message_id'),
    queue        text NOT NULL,
    group_id     uuid NOT NULL,
    handle       uuid NOT NULL,   -- the receiving endpoint
    seq          bigint NOT NULL, -- order within the conversation
    message_type text NOT NULL,
    body         bytea,
    -- Rolled-back receives of this message in a row (see sb.note_rollback).
    rollbacks    int NOT NULL DEFAULT 0,
    enqueued_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    CONSTRAINT message_pkey PRIMARY KEY (group_id, id)
) WITH (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000,
        autovacuum_vacuum_cost_delay = 0);
DO $$
BEGIN
    -- Installs from before keyed the messages by id, with a second index by (group_id,
    -- id): the key becomes (group_id, id) and the second index goes, once. (The key is
    -- built again: the table is taken, ACCESS EXCLUSIVE, until the install commits;
    -- docs/deployment.md, the upgrade to this release.)
    IF (SELECT array_agg(a.attname::text ORDER BY k.n)
          FROM pg_catalog.pg_constraint c
          CROSS JOIN LATERAL unnest(c.conkey) WITH ORDINALITY AS k(attnum, n)
          JOIN pg_catalog.pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum
         WHERE c.conrelid = 'sb.message'::regclass AND c.contype = 'p') = ARRAY['id'] THEN
        ALTER TABLE sb.message DROP CONSTRAINT message_pkey,
            ADD CONSTRAINT message_pkey PRIMARY KEY (group_id, id);
    END IF;
    IF pg_catalog.to_regclass('sb.message_group') IS NOT NULL THEN
        DROP INDEX sb.message_group;
    END IF;
    -- (No index by handle: every reader by handle knows the endpoint and so the group,
    -- a message's group being always its receiving endpoint's; it cost each message an
    -- index entry. Installs from before drop it, once.)
    IF pg_catalog.to_regclass('sb.message_handle') IS NOT NULL THEN
        DROP INDEX sb.message_handle;
    END IF;
END $$;

-- A message's body compressed with lz4 where the server has it (faster than pglz; a
-- Vraag is about 7 KB), once: SET COMPRESSION takes the table (ACCESS EXCLUSIVE) until
-- the install commits (docs/deployment.md: the upgrade to this release).
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals))
       AND (SELECT attcompression FROM pg_catalog.pg_attribute
             WHERE attrelid = 'sb.message'::regclass AND attname = 'body') <> 'l' THEN
        ALTER TABLE sb.message ALTER COLUMN body SET COMPRESSION lz4;
    END IF;
END $$;

-- One row per conversation group that has messages waiting: the row a receiver locks
-- (FOR UPDATE SKIP LOCKED) to hold the group until its transaction ends, and the
-- order in which groups are served (oldest waiting message first).
CREATE TABLE IF NOT EXISTS sb.group_ready (
    group_id uuid PRIMARY KEY,
    queue    text NOT NULL,
    first_id bigint NOT NULL
) WITH (fillfactor = 70, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 500,
        autovacuum_vacuum_cost_delay = 0);

-- Conversation priorities (CREATE BROKER PRIORITY): a level from 1 (low) to 10 (high),
-- 5 by default, given to each endpoint when it is made, from the priority whose
-- contract and services best match it (NULL stands for ANY), and kept until the
-- conversation ends. RECEIVE and GET CONVERSATION GROUP serve a queue's groups of the
-- highest level first, each level oldest first. There is no DROP: a level an endpoint
-- holds must stay known to the receivers (they look for the levels named here).
CREATE TABLE IF NOT EXISTS sb.broker_priority (
    name           text PRIMARY KEY,
    contract       text REFERENCES sb.contract,
    local_service  text REFERENCES sb.service,
    remote_service text,
    priority_level smallint NOT NULL CHECK (priority_level BETWEEN 1 AND 10)
);
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'sb.endpoint'::regclass AND attname = 'priority' AND NOT attisdropped) THEN
        ALTER TABLE sb.endpoint ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 5;
    END IF;
END $$;
-- BEGIN CONVERSATION TIMER: the timers set and not yet fired, one per endpoint (each side
-- has its own). A table of their own, empty unless a timer is set, so that every
-- RECEIVE's look for one due costs next to nothing: measured, a column of sb.endpoint with
-- a partial index cost 0.23 ms a receive, the planner scanning every endpoint. No
-- foreign key (its check would cost every endpoint's delete): a timer whose endpoint has
-- ended or gone is dropped when it is due.
CREATE TABLE IF NOT EXISTS sb.conversation_timer (
    handle uuid PRIMARY KEY,
    queue  text NOT NULL,   -- the endpoint's queue, where its DialogTimer goes
    due_at timestamptz NOT NULL
);
-- With conversation reuse every idle dialog has one. A RECEIVE looks for its own queue's
-- due timers, comparing with statement_timestamp(), which is stable, so this index
-- serves the look (a volatile clock would make the planner scan the table; measured: a
-- look of every queue's timers, and a scan, cost the pipeline 0.9 ms a request).
DO $$
BEGIN
    IF pg_catalog.to_regclass('sb.conversation_timer_due') IS NULL THEN
        CREATE INDEX IF NOT EXISTS conversation_timer_due ON sb.conversation_timer (queue, due_at);
    END IF;
END $$;
-- A group's level: the highest of its endpoints that have messages waiting. One index
-- serves every pick, with priorities or without (all at level 5 then): the levels are
-- searched in turn, each oldest first. (Builds before had a second index without the
-- level, which every ready row paid for: about 95 bytes of WAL per message.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'sb.group_ready'::regclass AND attname = 'priority' AND NOT attisdropped) THEN
        ALTER TABLE sb.group_ready ADD COLUMN IF NOT EXISTS priority smallint NOT NULL DEFAULT 5;
    END IF;
    IF pg_catalog.to_regclass('sb.group_ready_priority') IS NULL THEN
        CREATE INDEX IF NOT EXISTS group_ready_priority ON sb.group_ready (queue, priority, first_id);
    END IF;
    IF pg_catalog.to_regclass('sb.group_ready_order') IS NOT NULL THEN
        DROP INDEX sb.group_ready_order;
    END IF;
END $$;
-- A message's level: its receiving endpoint's, fixed for the conversation's life, so
-- that what is left of a group gives the group's level with no look at the endpoints.
-- Messages of an install from before take their endpoint's, once.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'sb.message'::regclass AND attname = 'priority' AND NOT attisdropped) THEN
        ALTER TABLE sb.message ADD COLUMN priority smallint NOT NULL DEFAULT 5;
        UPDATE sb.message m SET priority = e.priority FROM sb.endpoint e
         WHERE e.handle = m.handle AND e.priority <> 5;
    END IF;
END $$;

-- Helpers ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION sb.fail(code text, message text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION USING ERRCODE = code, MESSAGE = message;
END $$;

-- Permissions, as Service Broker's: SEND on a service (to begin a dialog to it, and to
-- send to it), RECEIVE on a queue (to receive from it, to wait on it, and to end or move
-- the conversations of its services). Granted to roles by sb.grant_send and
-- sb.grant_receive; checked against the login (session_user: the functions run with
-- their owner's rights, see 006_security.sql). The owner of schema sb (the installer)
-- and members of it may do everything.
CREATE TABLE IF NOT EXISTS sb.permission (
    right_name  text NOT NULL CHECK (right_name IN ('SEND', 'RECEIVE')),
    object_name text NOT NULL,
    grantee     name NOT NULL,
    PRIMARY KEY (right_name, object_name, grantee)
);

-- PL/pgSQL, like every function called on a hot path here: every function has a pinned
-- search_path (006_security.sql), so a language sql function is never inlined, and its
-- body is planned again in every transaction that calls it (or, inside a query, on every
-- execution). Measured: as language sql this check cost 0.35 ms per receive, the first
-- call of each transaction; PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION sb.may(p_right text, p_object text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN pg_catalog.pg_has_role(session_user,
               (SELECT n.nspowner FROM pg_catalog.pg_namespace n WHERE n.nspname = 'sb'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM sb.permission p JOIN pg_catalog.pg_roles r ON r.rolname = p.grantee
                    WHERE p.right_name = p_right AND p.object_name = p_object
                      AND pg_catalog.pg_has_role(session_user, r.oid, 'MEMBER'));
END $$;

-- Error 42501 (insufficient_privilege) unless the login has p_right on p_object.
-- Callers on hot paths write `IF NOT sb.may(r, o) THEN PERFORM sb.require_right(r, o);
-- END IF;`: PL/pgSQL evaluates an IF whose condition is a plain function call as a
-- simple expression, without a query of its own, where a PERFORM is a query each time
-- (measured: one statement fewer per check; docs/postgresql.md, "Hot paths").
CREATE OR REPLACE FUNCTION sb.require_right(p_right text, p_object text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT sb.may(p_right, p_object) THEN
        RAISE EXCEPTION USING ERRCODE = '42501',
            MESSAGE = format('The %s permission was denied on %s %s for login %s.', p_right,
                             CASE p_right WHEN 'SEND' THEN 'service' ELSE 'queue' END, p_object, session_user),
            HINT = format('SELECT sb.grant_%s(%L, <a role of %s>) as the installer', lower(p_right), p_object, session_user);
    END IF;
END $$;

-- GRANT SEND ON SERVICE::s TO role; GRANT RECEIVE ON queue TO role. Idempotent.
-- On a side of a split install SEND may be granted on a service of the other side (it
-- is reached over a route).
CREATE OR REPLACE FUNCTION sb.grant_send(p_service text, p_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sb.service WHERE name = p_service) AND sb.side() = 'both' THEN
        PERFORM sb.fail('SB424', format('service %s is not found', p_service));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
        PERFORM sb.fail('42704', format('role %s does not exist', p_role));
    END IF;
    INSERT INTO sb.permission VALUES ('SEND', p_service, p_role) ON CONFLICT DO NOTHING;
END $$;

CREATE OR REPLACE FUNCTION sb.grant_receive(p_queue text, p_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = p_queue) THEN
        PERFORM sb.fail('SB404', format('queue %s is not found', p_queue));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_role) THEN
        PERFORM sb.fail('42704', format('role %s does not exist', p_role));
    END IF;
    INSERT INTO sb.permission VALUES ('RECEIVE', p_queue, p_role) ON CONFLICT DO NOTHING;
END $$;

-- REVOKE SEND | RECEIVE ON … FROM role.
CREATE OR REPLACE FUNCTION sb.revoke_right(p_right text, p_object text, p_role name) RETURNS void
LANGUAGE sql AS $$
    DELETE FROM sb.permission WHERE right_name = p_right AND object_name = p_object AND grantee = p_role
$$;

-- The text of a UTF-16 body: little-endian after FF FE or when the first character's
-- second byte is 0 (XML 1.0 appendix F: '<' as 3C 00), big-endian after FE FF or as
-- 00 3C. Surrogate pairs are joined; an odd length, a lone surrogate or U+0000 is an
-- error (none is well-formed XML).
CREATE OR REPLACE FUNCTION sb.utf16_text(p_body bytea) RETURNS text
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
    v_le    boolean;
    v_start int := 0;
    v_text  text;
BEGIN
    IF get_byte(p_body, 0) = 255 AND get_byte(p_body, 1) = 254 THEN
        v_le := true; v_start := 2;
    ELSIF get_byte(p_body, 0) = 254 AND get_byte(p_body, 1) = 255 THEN
        v_le := false; v_start := 2;
    ELSE
        v_le := get_byte(p_body, 1) = 0;
    END IF;
    IF (length(p_body) - v_start) % 2 <> 0 THEN
        RAISE EXCEPTION 'an odd number of bytes is not UTF-16';
    END IF;
    WITH u AS (
        SELECT i, CASE WHEN v_le THEN get_byte(p_body, i) + 256 * get_byte(p_body, i + 1)
                       ELSE 256 * get_byte(p_body, i) + get_byte(p_body, i + 1) END AS c
          FROM generate_series(v_start, length(p_body) - 2, 2) AS i
    ), p AS (
        SELECT i, c, lead(c) OVER (ORDER BY i) AS nx, lag(c) OVER (ORDER BY i) AS pv FROM u
    )
    SELECT string_agg(CASE
               WHEN c BETWEEN 55296 AND 56319 AND nx BETWEEN 56320 AND 57343
                   THEN chr(65536 + (c - 55296) * 1024 + (nx - 56320))
               WHEN c BETWEEN 56320 AND 57343 AND pv BETWEEN 55296 AND 56319 THEN ''
               WHEN c BETWEEN 55296 AND 57343 THEN sb.fail_text('a lone surrogate is not UTF-16')
               ELSE chr(c) END, '' ORDER BY i)
      INTO v_text FROM p;
    RETURN coalesce(v_text, '');
END $$;

-- Raises `message`; typed text so that it can stand in an expression.
CREATE OR REPLACE FUNCTION sb.fail_text(message text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%', message;
END $$;

-- Locks both endpoints of a conversation, always in handle order (so that two sides
-- acting at once wait for each other instead of deadlocking), in one statement; returns
-- this side (e) and the far one (far: NULLs when there is none, or it was removed).
CREATE OR REPLACE FUNCTION sb.lock_conversation(p_handle uuid, OUT e sb.endpoint, OUT far sb.endpoint)
LANGUAGE plpgsql AS $$
DECLARE
    r sb.endpoint;
BEGIN
    FOR r IN SELECT * FROM sb.endpoint
              WHERE handle IN (p_handle, (SELECT far_handle FROM sb.endpoint WHERE handle = p_handle))
              ORDER BY handle FOR UPDATE
    LOOP
        IF r.handle = p_handle THEN
            e := r;
        ELSE
            far := r;
        END IF;
    END LOOP;
    IF e.handle IS NULL THEN
        PERFORM sb.fail('SB426', format('the conversation handle %s is not found', p_handle));
    END IF;
    IF e.far_handle IS NOT NULL AND far.handle IS DISTINCT FROM e.far_handle THEN
        -- The far side appeared while this waited for the lock (the dialog's first SEND).
        SELECT * INTO far FROM sb.endpoint WHERE handle = e.far_handle;
    END IF;
END $$;

-- sb.lock_conversation's this side.
CREATE OR REPLACE FUNCTION sb.lock_endpoint(p_handle uuid) RETURNS sb.endpoint
LANGUAGE plpgsql AS $$
BEGIN
    RETURN (sb.lock_conversation(p_handle)).e;
END $$;

-- The NOTIFY channel of a queue (a wake-up for waiting receivers).
CREATE OR REPLACE FUNCTION sb.channel(p_queue text) RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT sb.may('RECEIVE', p_queue) THEN
        PERFORM sb.require_right('RECEIVE', p_queue);
    END IF;
    RETURN (SELECT 'sb_queue_' || id FROM sb.queue WHERE name = p_queue);
END $$;

-- Wake-ups: a NOTIFY only when a receiver waits ------------------------------------------
-- A transaction that NOTIFYs takes a cluster-wide lock at commit and holds it through its
-- WAL flush, so notifying commits are serialised (measured: a send per commit could not
-- pass about 525/s from two connections). A send therefore notifies only when a receiver
-- is waiting on the queue. Two advisory locks per queue (two-int keys: 1396834305 and
-- 1396834306 are 'SB' << 16 + 1 and + 2, the second key the queue's id) make that safe:
--   WAIT (…305): a waiting receiver holds it shared, as a session lock, while it waits;
--   GATE (…306): a sender holds it shared from just before it looks for waiters to the
--                end of its transaction.
-- A sender takes GATE, then tries WAIT exclusively: if that fails, a receiver waits (or
-- another sender is trying at this instant) and the sender notifies at commit.
-- A receiver about to wait takes WAIT, then tries GATE exclusively, then RECEIVEs once
-- more; it waits for a notification without limit only if GATE was free, otherwise it
-- looks again after a short time. No wake-up is lost: a sender that looked for waiters
-- after the receiver took WAIT notifies; one that looked before held GATE since, so it
-- had either committed (its message visible: a lock is released after the commit is)
-- when the receiver found GATE free, or the receiver found GATE taken and does not wait
-- long. The locks are released at once after each try; only the marks are held.
CREATE OR REPLACE FUNCTION sb.queue_id(p_queue text) RETURNS int
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_id int;
BEGIN
    SELECT id INTO v_id FROM sb.queue WHERE name = p_queue;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB404', format('queue %s is not found', p_queue));
    END IF;
    RETURN v_id;
END $$;

-- Whether nobody holds the advisory lock (p_class, p_id): tried exclusively, released at once.
-- (Assignments, not PERFORM, here and in sb.wake_group: a simple expression, evaluated
-- without a query; these run on every send.)
CREATE OR REPLACE FUNCTION sb.lock_is_free(p_class int, p_id int) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_unlocked boolean;
BEGIN
    IF pg_try_advisory_lock(p_class, p_id) THEN
        v_unlocked := pg_advisory_unlock(p_class, p_id);
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- A send's wake-up (see above): at commit, notifies the queue's channel if a receiver
-- waits on it. For a conversation group made ready (p_group), the notification names the group, so
-- that a transaction that readies several groups notifies once for each (identical
-- notifications of one transaction are folded into one) and a listening worker wakes one
-- waiting reader for each; a notification without a group (p_group NULL) wakes every
-- reader waiting on the queue.
CREATE OR REPLACE FUNCTION sb.wake_group(p_queue_id int, p_group uuid) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_void text;
BEGIN
    v_void := pg_advisory_xact_lock_shared(1396834306, p_queue_id)::text;
    IF NOT sb.lock_is_free(1396834305, p_queue_id) THEN
        v_void := pg_notify('sb_queue_' || p_queue_id, coalesce(p_group::text, ''))::text;
    END IF;
END $$;

CREATE OR REPLACE FUNCTION sb.wake_id(p_queue_id int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sb.wake_group(p_queue_id, NULL);
END $$;

CREATE OR REPLACE FUNCTION sb.wake(p_queue text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM sb.wake_id(sb.queue_id(p_queue));
END $$;

-- A receiver about to wait on the queue's channel marks itself waiting (released by
-- sb.end_wait, or when its session ends) and learns whether no send to the queue is in
-- flight: true, it may wait without limit after one more RECEIVE; false, it looks again
-- soon. Call it on the session that receives, then RECEIVE, then wait.
CREATE OR REPLACE FUNCTION sb.begin_wait(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_id   int := sb.queue_id(p_queue);
    v_void text;
BEGIN
    IF NOT sb.may('RECEIVE', p_queue) THEN
        PERFORM sb.require_right('RECEIVE', p_queue);
    END IF;
    v_void := pg_advisory_lock_shared(1396834305, v_id)::text;
    RETURN sb.lock_is_free(1396834306, v_id);
END $$;

-- A receiver that has stopped waiting (woken, or before it works) drops its mark: sends
-- no longer notify for it. Returns false if it held none.
CREATE OR REPLACE FUNCTION sb.end_wait(p_queue text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF NOT sb.may('RECEIVE', p_queue) THEN
        PERFORM sb.require_right('RECEIVE', p_queue);
    END IF;
    RETURN pg_advisory_unlock_shared(1396834305, sb.queue_id(p_queue));
END $$;

-- Catalogue definitions (idempotent) ---------------------------------------------------

CREATE OR REPLACE FUNCTION sb.create_message_type(p_name text, p_validation text DEFAULT 'NONE')
RETURNS void LANGUAGE sql AS $$
    INSERT INTO sb.message_type (name, validation) VALUES (p_name, p_validation)
    ON CONFLICT (name) DO UPDATE SET validation = excluded.validation
$$;

-- p_messages: {{message_type, sent_by}, ...}
CREATE OR REPLACE FUNCTION sb.create_contract(p_name text, p_messages text[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sb.contract (name) VALUES (p_name) ON CONFLICT DO NOTHING;
    INSERT INTO sb.contract_message (contract, message_type, sent_by)
    SELECT p_name, p_messages[i][1], p_messages[i][2]
      FROM generate_subscripts(p_messages, 1) AS i
    ON CONFLICT (contract, message_type) DO UPDATE SET sent_by = excluded.sent_by;
END $$;

CREATE OR REPLACE FUNCTION sb.create_queue(p_name text, p_enabled boolean DEFAULT true,
    p_poison_handling boolean DEFAULT true, p_max_readers int DEFAULT 0)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_id int;
BEGIN
    INSERT INTO sb.queue (name, enabled, poison_handling, max_readers)
    VALUES (p_name, p_enabled, p_poison_handling, p_max_readers)
    ON CONFLICT (name) DO UPDATE SET enabled = excluded.enabled,
        poison_handling = excluded.poison_handling, max_readers = excluded.max_readers
    RETURNING id INTO v_id;
    PERFORM sb.create_floor_seq(v_id);
END $$;

CREATE OR REPLACE FUNCTION sb.alter_queue(p_name text, p_enabled boolean DEFAULT NULL,
    p_poison_handling boolean DEFAULT NULL, p_max_readers int DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sb.queue SET enabled = coalesce(p_enabled, enabled),
        poison_handling = coalesce(p_poison_handling, poison_handling),
        max_readers = coalesce(p_max_readers, max_readers)
     WHERE name = p_name;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB404', format('queue %s is not found', p_name));
    END IF;
    -- Enabled: the waiting receivers look again. Disabled: they look too, and a RECEIVE
    -- waiting on a queue set to OFF returns its error at once (the RECEIVE page).
    IF p_enabled IS NOT NULL THEN
        PERFORM pg_notify(sb.channel(p_name), '');
    END IF;
END $$;

CREATE OR REPLACE FUNCTION sb.create_service(p_name text, p_queue text, p_contracts text[] DEFAULT '{}')
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sb.service (name, queue) VALUES (p_name, p_queue)
    ON CONFLICT (name) DO UPDATE SET queue = excluded.queue;
    INSERT INTO sb.service_contract (service, contract)
    SELECT p_name, c FROM unnest(p_contracts) AS c ON CONFLICT DO NOTHING;
END $$;

-- CREATE BROKER PRIORITY name FOR CONVERSATION SET (CONTRACT_NAME, LOCAL_SERVICE_NAME,
-- REMOTE_SERVICE_NAME, PRIORITY_LEVEL); NULL for ANY. Running it again with the same name
-- changes it (for endpoints made from then on), so an install can be run again.
CREATE OR REPLACE FUNCTION sb.create_broker_priority(p_name text, p_contract text, p_local_service text,
    p_remote_service text, p_priority_level int DEFAULT 5)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sb.broker_priority (name, contract, local_service, remote_service, priority_level)
    VALUES (p_name, p_contract, p_local_service, p_remote_service, p_priority_level)
    ON CONFLICT (name) DO UPDATE SET contract = excluded.contract, local_service = excluded.local_service,
        remote_service = excluded.remote_service, priority_level = excluded.priority_level;
END $$;

-- The level of an endpoint of p_local_service talking to p_remote_service on
-- p_contract: the best match in Service Broker's precedence (a named contract before
-- ANY, then a named local service, then a named remote service), 5 when none matches.
CREATE OR REPLACE FUNCTION sb.priority_of(p_contract text, p_local_service text, p_remote_service text)
RETURNS smallint LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_level smallint;
BEGIN
    SELECT priority_level INTO v_level FROM sb.broker_priority
     WHERE (contract IS NULL OR contract = p_contract)
       AND (local_service IS NULL OR local_service = p_local_service)
       AND (remote_service IS NULL OR remote_service = p_remote_service)
     ORDER BY contract IS NULL, local_service IS NULL, remote_service IS NULL, name
     LIMIT 1;
    RETURN coalesce(v_level, 5);
END $$;

-- Dialogs -----------------------------------------------------------------------------

-- A conversation group lives while a conversation uses it, and BEGIN DIALOG with a
-- RELATED_CONVERSATION_GROUP that is gone makes it again. Two transactions can meet on
-- one group: one begins a dialog in it while the other ends its last conversation. The
-- one that begins holds the row (FOR KEY SHARE) before it adds its endpoint, or makes
-- the row when it is gone; the one that ends locks the rows (FOR UPDATE) and only then,
-- in a statement of its own and so with a snapshot that sees what it waited for,
-- deletes the groups nothing uses. Without the lock the second could delete the row
-- between the first's look and its endpoint (leaving an endpoint whose group, and so its
-- queue for SB409, is forgotten), or the first could find the row gone and make it again
-- while the second still deletes it.

-- Holds group p_group until the transaction ends, making it in queue p_queue when it
-- does not exist; returns the group's queue.
CREATE OR REPLACE FUNCTION sb.hold_group(p_group uuid, p_queue text)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_gqueue text;
BEGIN
    LOOP
        -- Waits for a transaction deleting the row, and then finds it gone.
        SELECT queue INTO v_gqueue FROM sb.conversation_group WHERE id = p_group FOR KEY SHARE;
        IF FOUND THEN
            RETURN v_gqueue;
        END IF;
        -- Waits for a transaction inserting the same row; finding it then, looks again.
        INSERT INTO sb.conversation_group (id, queue) VALUES (p_group, p_queue) ON CONFLICT (id) DO NOTHING;
        IF FOUND THEN
            RETURN p_queue;
        END IF;
    END LOOP;
END $$;

-- Deletes those of groups p_groups that no endpoint and no waiting message uses.
CREATE OR REPLACE FUNCTION sb.drop_unused_groups(p_groups uuid[])
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    -- In id order, so that two enders of the same groups wait instead of deadlocking.
    PERFORM 1 FROM sb.conversation_group WHERE id = ANY (p_groups) ORDER BY id FOR UPDATE;
    -- (OFFSET 0 keeps each NOT EXISTS a probe of its index per group: as an anti join,
    -- planned while the tables looked empty, it read the whole of sb.message's index,
    -- about 160 buffers each end; docs/postgresql.md, "Hot paths, in statements".)
    DELETE FROM sb.conversation_group g
     WHERE g.id = ANY (p_groups)
       AND NOT EXISTS (SELECT 1 FROM sb.endpoint e WHERE e.group_id = g.id OFFSET 0)
       AND NOT EXISTS (SELECT 1 FROM sb.message m WHERE m.group_id = g.id OFFSET 0);
END $$;

CREATE OR REPLACE FUNCTION sb.begin_dialog(p_from_service text, p_to_service text, p_contract text,
    p_related_group uuid DEFAULT NULL, p_lifetime_seconds int DEFAULT NULL)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_queue  text;
    v_group  uuid := coalesce(p_related_group, gen_random_uuid());
    v_handle uuid := gen_random_uuid();
    v_gqueue text;
    v_route  text;
BEGIN
    SELECT queue INTO v_queue FROM sb.service WHERE name = p_from_service;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB424', format('service %s is not found', p_from_service));
    END IF;
    -- A route for the target service wins over the service here, as in Service Broker
    -- (the local route is the least specific); among several, new dialogs take turns.
    v_route := sb.pick_route(p_to_service);
    IF v_route IS NULL AND NOT EXISTS (SELECT 1 FROM sb.service WHERE name = p_to_service) THEN
        PERFORM sb.fail('SB424', format('target service %s is not found, and no route leads to it', p_to_service));
    END IF;
    IF NOT sb.may('SEND', p_to_service) THEN
        PERFORM sb.require_right('SEND', p_to_service);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM sb.contract WHERE name = p_contract) THEN
        PERFORM sb.fail('SB425', format('contract %s is not found', p_contract));
    END IF;
    -- (A far service checks its contracts when the dialog's first message arrives.)
    IF v_route IS NULL
       AND NOT EXISTS (SELECT 1 FROM sb.service_contract WHERE service = p_to_service AND contract = p_contract) THEN
        PERFORM sb.fail('SB425', format('service %s does not accept contract %s', p_to_service, p_contract));
    END IF;
    v_gqueue := sb.hold_group(v_group, v_queue);
    IF v_gqueue <> v_queue THEN
        PERFORM sb.fail('SB409', format('conversation group %s belongs to queue %s, not %s', v_group, v_gqueue, v_queue));
    END IF;
    INSERT INTO sb.endpoint (handle, conversation_id, is_initiator, service, far_service, contract,
                             group_id, state, expires_at, priority, route)
    VALUES (v_handle, gen_random_uuid(), true, p_from_service, p_to_service, p_contract, v_group, 'SO',
            CASE WHEN p_lifetime_seconds IS NOT NULL THEN now() + make_interval(secs => p_lifetime_seconds) END,
            sb.priority_of(p_contract, p_from_service, p_to_service), v_route);
    RETURN v_handle;
END $$;

-- Puts a message for endpoint p_handle (in group p_group, at level p_priority) on queue
-- p_queue (id p_queue_id), marks its group ready and wakes a waiting receiver at commit
-- (a notification naming the group: sb.wake_group).
DROP FUNCTION IF EXISTS sb.put_message(text, int, uuid, uuid, bigint, text, bytea);
CREATE OR REPLACE FUNCTION sb.put_message(p_queue text, p_queue_id int, p_group uuid, p_handle uuid,
    p_seq bigint, p_message_type text, p_body bytea, p_priority smallint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_id   bigint;
    v_void text;
BEGIN
    INSERT INTO sb.message (queue, group_id, handle, seq, message_type, body, priority)
    VALUES (p_queue, p_group, p_handle, p_seq, p_message_type, p_body, p_priority)
    RETURNING id INTO v_id;
    -- DO UPDATE, not DO NOTHING: when a receiver holds the group's row, this waits for
    -- it. The receiver cannot see this uncommitted message and deletes the row when it
    -- has taken the group's last visible one; waiting, this insert then finds the row
    -- gone and inserts it again. With DO NOTHING the message would be left with no
    -- ready row, never to be received.
    INSERT INTO sb.group_ready (group_id, queue, first_id, priority) VALUES (p_group, p_queue, v_id, p_priority)
    ON CONFLICT (group_id) DO UPDATE SET first_id = least(sb.group_ready.first_id, excluded.first_id),
        priority = greatest(sb.group_ready.priority, excluded.priority);
    v_void := sb.wake_group(p_queue_id, p_group)::text;
END $$;

-- Removes group p_group's ready row when no message of it waits. The row is locked first,
-- in a statement of its own: a transaction that put a message in the group meanwhile is
-- waited for, and the check that follows (a statement of its own, so a new snapshot)
-- sees its message. (In one statement, a wait for the row would re-check the row only,
-- not whether messages wait.) A transaction that puts one after the lock waits for this
-- one, finds the row gone and makes it again (sb.put_message).
CREATE OR REPLACE FUNCTION sb.drop_ready_if_empty(p_group uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM 1 FROM sb.group_ready WHERE group_id = p_group FOR UPDATE;
    IF FOUND THEN
        DELETE FROM sb.group_ready g
         WHERE g.group_id = p_group AND NOT EXISTS (SELECT 1 FROM sb.message m WHERE m.group_id = p_group);
    END IF;
END $$;

-- Puts one message on the far side of endpoint `e`, counting it in e's sequence (no
-- contract checks: callers do). The caller holds both endpoints (sb.lock_endpoint).
CREATE OR REPLACE FUNCTION sb.enqueue(e sb.endpoint, p_message_type text, p_body bytea)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_far_group uuid;
    v_far_level smallint;
    v_queue     text;
    v_qid       int;
    v_seq       bigint;
BEGIN
    SELECT f.group_id, f.priority, q.name, q.id INTO v_far_group, v_far_level, v_queue, v_qid
      FROM sb.endpoint f JOIN sb.service s ON s.name = f.service JOIN sb.queue q ON q.name = s.queue
     WHERE f.handle = e.far_handle;
    IF NOT FOUND THEN
        -- The far side was removed WITH CLEANUP: nobody will receive this. (SQL Server
        -- keeps such a message in sys.transmission_queue for ever; here it is dropped.)
        RETURN;
    END IF;
    UPDATE sb.endpoint SET send_seq = send_seq + 1 WHERE handle = e.handle RETURNING send_seq INTO v_seq;
    PERFORM sb.put_message(v_queue, v_qid, v_far_group, e.far_handle, v_seq, p_message_type, p_body, v_far_level);
END $$;

-- Whether p_body is well-formed XML, read in the encoding it is written in, as SQL
-- Server does: a byte-order mark, or (XML 1.0, appendix F) a first character with a
-- zero byte: UTF-16, as T-SQL clients send NVARCHAR (no mark) and xml (with one). UTF-8
-- otherwise, the common case, at no extra cost. Raises with the parser's reason when it
-- is not.
CREATE OR REPLACE FUNCTION sb.check_well_formed(p_body bytea, p_message_type text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF length(p_body) >= 2 AND (get_byte(p_body, 0) IN (0, 254, 255) OR get_byte(p_body, 1) = 0) THEN
        PERFORM xmlparse(DOCUMENT sb.utf16_text(p_body));
    ELSIF length(p_body) >= 3 AND get_byte(p_body, 0) = 239 AND get_byte(p_body, 1) = 187
          AND get_byte(p_body, 2) = 191 THEN
        PERFORM xmlparse(DOCUMENT convert_from(substring(p_body FROM 4), 'UTF8'));
    ELSE
        PERFORM xmlparse(DOCUMENT convert_from(coalesce(p_body, ''), 'UTF8'));
    END IF;
EXCEPTION WHEN OTHERS THEN
    PERFORM sb.fail('SB615', format('a message of type %s failed XML validation: %s', p_message_type, SQLERRM));
END $$;

-- The rules of a SEND that need no look of their own, for sb.send_checks here and
-- sb.send_remote (008_routes.sql): the endpoint's state, the message type's place in the
-- contract (p_sent_by, NULL when it has none) and the body's validation (p_validation;
-- none with p_trusted). Called in an assignment (no query of its own).
CREATE OR REPLACE FUNCTION sb.check_send(e sb.endpoint, p_message_type text, p_body bytea, p_sent_by text,
    p_validation text, p_trusted boolean)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF e.state NOT IN ('SO', 'SI', 'CO') THEN
        PERFORM sb.fail('SB429', format('the conversation endpoint %s is in state %s, not valid for SEND', e.handle, e.state));
    END IF;
    IF p_sent_by IS NULL THEN
        PERFORM sb.fail('SB431', format('the message type %s is not part of contract %s', p_message_type, e.contract));
    END IF;
    IF p_sent_by <> 'ANY' AND p_sent_by <> (CASE WHEN e.is_initiator THEN 'INITIATOR' ELSE 'TARGET' END) THEN
        PERFORM sb.fail('SB432', format('the message type %s is sent by %s only in contract %s; this side is the %s',
            p_message_type, lower(p_sent_by), e.contract, CASE WHEN e.is_initiator THEN 'initiator' ELSE 'target' END));
    END IF;
    IF p_validation = 'EMPTY' AND length(coalesce(p_body, '')) > 0 THEN
        PERFORM sb.fail('SB615', format('a message of type %s must be empty', p_message_type));
    ELSIF p_validation = 'WELL_FORMED_XML' AND NOT p_trusted THEN
        PERFORM sb.check_well_formed(p_body, p_message_type);
    END IF;
END $$;

-- What a SEND checks on this side's endpoint `e` (locked by the caller) before it puts
-- the message: the right to SEND on the far service, the endpoint's state, the message
-- type's place in the contract and the body's validation (none with p_trusted); the far
-- queue, from the same look at the catalogue. For sb.send_as and sb.send_if_ready, which
-- call it in an assignment (no query of its own).
CREATE OR REPLACE FUNCTION sb.send_checks(e sb.endpoint, p_message_type text, p_body bytea, p_trusted boolean,
    OUT queue text, OUT queue_id int)
LANGUAGE plpgsql AS $$
DECLARE
    c      record;
    v_void text;
BEGIN
    IF NOT sb.may('SEND', e.far_service) THEN
        PERFORM sb.require_right('SEND', e.far_service);
    END IF;
    SELECT cm.sent_by, mt.validation, q.name AS queue, q.id AS queue_id
      INTO c
      FROM sb.service s JOIN sb.queue q ON q.name = s.queue
      LEFT JOIN sb.contract_message cm ON cm.contract = e.contract AND cm.message_type = p_message_type
      LEFT JOIN sb.message_type mt ON mt.name = p_message_type
     WHERE s.name = e.far_service;
    v_void := sb.check_send(e, p_message_type, p_body, c.sent_by, c.validation, p_trusted)::text;
    queue := c.queue;
    queue_id := c.queue_id;
END $$;

-- SEND ON CONVERSATION. One look at the catalogue (the right, the message type's place
-- in the contract, its validation, the far queue) and one write of this endpoint.
CREATE OR REPLACE FUNCTION sb.send(p_handle uuid, p_message_type text, p_body bytea DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void text;
BEGIN
    -- (An assignment: the call is evaluated without a query of its own.)
    v_void := sb.send_as(p_handle, p_message_type, p_body, false)::text;
END $$;

-- SEND, for the broker's own senders too: with p_trusted the body is not validated.
-- Only rekenserver.stuur_vraag passes it, for the Vraag it has just built with
-- xmlelement, when the Vraag's text holds no character XML forbids (xmlelement always
-- makes one element with its text escaped, but passes control characters a roster text
-- may hold through as they are: such a Vraag is validated, and refused, as before).
-- Parsing it again cost 0.15-0.2 ms a request. Granted to no role (006_security.sql): a
-- client's SEND is always validated.
CREATE OR REPLACE FUNCTION sb.send_as(p_handle uuid, p_message_type text, p_body bytea, p_trusted boolean)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void   text;
    e          sb.endpoint;
    c          record;
    v_far      uuid;
    v_group    uuid;
    v_level    smallint;
    v_seq      bigint;
    v_peek     uuid;
BEGIN
    -- This side's endpoint is locked for the send; the far side's only against its end
    -- and its move (FOR KEY SHARE, which END, END WITH CLEANUP and MOVE CONVERSATION
    -- wait for: they lock FOR UPDATE). The far side's own SEND and RECEIVE go on
    -- meanwhile: in Service Broker a lock is taken on one side only, and a lock the
    -- target holds does not block the initiator ("Conversation group locks"). In handle
    -- order, as sb.lock_conversation takes them, so a send and an end wait for each
    -- other instead of deadlocking.
    -- (A far side locked first is read as it is locked: its group and level, which
    -- nothing changes while the lock is held.)
    SELECT far_handle INTO v_peek FROM sb.endpoint WHERE handle = p_handle;
    IF v_peek < p_handle THEN
        SELECT group_id, priority INTO v_group, v_level FROM sb.endpoint WHERE handle = v_peek FOR KEY SHARE;
    END IF;
    SELECT * INTO e FROM sb.endpoint WHERE handle = p_handle FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB426', format('the conversation handle %s is not found', p_handle));
    END IF;
    IF e.route IS NOT NULL THEN
        PERFORM sb.send_remote(e, p_message_type, p_body);
        RETURN;
    END IF;
    c := sb.send_checks(e, p_message_type, p_body, p_trusted);
    IF e.far_handle IS NULL THEN
        -- First message of the dialog: the target endpoint appears, in a new group of
        -- the target's own (groups are local to each side).
        v_far := gen_random_uuid();
        v_group := gen_random_uuid();
        INSERT INTO sb.conversation_group (id, queue) VALUES (v_group, c.queue);
        v_level := sb.priority_of(e.contract, e.far_service, e.service);
        INSERT INTO sb.endpoint (handle, conversation_id, is_initiator, service, far_service, contract,
                                 group_id, far_handle, state, expires_at, priority)
        VALUES (v_far, e.conversation_id, NOT e.is_initiator, e.far_service, e.service, e.contract,
                v_group, e.handle, 'SI', e.expires_at, v_level);
        UPDATE sb.endpoint SET far_handle = v_far, state = 'CO', send_seq = send_seq + 1
         WHERE handle = e.handle RETURNING send_seq INTO v_seq;
    ELSE
        IF v_group IS NULL OR e.far_handle IS DISTINCT FROM v_peek THEN
            SELECT group_id, priority INTO v_group, v_level FROM sb.endpoint
             WHERE handle = e.far_handle FOR KEY SHARE;
        END IF;
        IF v_group IS NULL THEN
            -- The far side was removed WITH CLEANUP: nobody will receive this. (SQL
            -- Server keeps such a message in sys.transmission_queue for ever; here it is
            -- dropped.)
            IF e.state = 'SO' THEN
                UPDATE sb.endpoint SET state = 'CO' WHERE handle = e.handle;
            END IF;
            RETURN;
        END IF;
        v_far := e.far_handle;
        UPDATE sb.endpoint SET state = CASE WHEN state = 'SO' THEN 'CO' ELSE state END, send_seq = send_seq + 1
         WHERE handle = e.handle RETURNING send_seq INTO v_seq;
    END IF;
    v_void := sb.put_message(c.queue, c.queue_id, v_group, v_far, v_seq, p_message_type, p_body, v_level)::text;
END $$;

-- BEGIN CONVERSATION TIMER (handle) TIMEOUT = seconds: after the timeout a DialogTimer
-- message (empty) arrives on this side's queue, for this conversation; the other side is
-- not told. A new call before it fires sets the new timeout. Needs the right to SEND on
-- the conversation, as in Service Broker. (A TIMEOUT of 0, which Microsoft's page does
-- not describe, makes the timer due at once; a negative one is refused.)
CREATE OR REPLACE FUNCTION sb.begin_conversation_timer(p_handle uuid, p_timeout_seconds int)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    e sb.endpoint;
BEGIN
    IF p_timeout_seconds IS NULL OR p_timeout_seconds < 0 THEN
        PERFORM sb.fail('22023', format('the TIMEOUT of a conversation timer is %s seconds: it must be 0 or more',
            coalesce(p_timeout_seconds::text, 'NULL')));
    END IF;
    -- This side only, as a SEND locks it.
    SELECT * INTO e FROM sb.endpoint WHERE handle = p_handle FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB426', format('the conversation handle %s is not found', p_handle));
    END IF;
    IF NOT sb.may('SEND', e.far_service) THEN
        PERFORM sb.require_right('SEND', e.far_service);
    END IF;
    IF e.state IN ('DO', 'CD') THEN
        PERFORM sb.fail('SB429', format('the conversation endpoint %s is already ended (state %s)', p_handle, e.state));
    END IF;
    INSERT INTO sb.conversation_timer (handle, queue, due_at)
    SELECT p_handle, s.queue, clock_timestamp() + make_interval(secs => p_timeout_seconds)
      FROM sb.service s WHERE s.name = e.service
    ON CONFLICT (handle) DO UPDATE SET due_at = EXCLUDED.due_at;
END $$;

-- Puts a DialogTimer message on queue p_queue for each of its conversations whose timer
-- is due; returns how many. Called by every RECEIVE and GET CONVERSATION GROUP that
-- looks for a group while a timer is due, inside its transaction (it commits or rolls
-- back with it). It does not wait on a receiver: a group a receiver holds, a timer
-- another transaction holds (one setting it again, another receiver firing it) and an
-- endpoint being ended or moved are left to the next look. (It can wait on a send into
-- the same group committing at that moment, as any send can.) The message has sequence
-- number 0, so a RECEIVE returns it before the conversation's other messages, as Service
-- Broker does ("Broker System Messages"). A timer of a side that has ended is dropped.
CREATE OR REPLACE FUNCTION sb.fire_timers(p_queue text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    t   record;
    v_n int := 0;
BEGIN
    -- Timers whose endpoint has ended, or is gone, are dropped (those no other look holds).
    DELETE FROM sb.conversation_timer
     WHERE handle IN (SELECT c.handle FROM sb.conversation_timer c
                       WHERE c.queue = p_queue AND c.due_at <= statement_timestamp()
                         AND NOT EXISTS (SELECT 1 FROM sb.endpoint e
                                          WHERE e.handle = c.handle AND e.state NOT IN ('DO', 'CD'))
                         FOR UPDATE SKIP LOCKED);
    FOR t IN
        SELECT e.handle, e.group_id, e.priority, q.id AS queue_id
          FROM sb.conversation_timer c JOIN sb.endpoint e ON e.handle = c.handle
          JOIN sb.queue q ON q.name = c.queue
         WHERE c.queue = p_queue AND c.due_at <= statement_timestamp() AND e.state NOT IN ('DO', 'CD')
         ORDER BY c.due_at
         -- A few at a time: many timers due together (the dialogs of a bulk import gone
         -- idle) are spread over the next looks instead of one long transaction.
         LIMIT 16
    LOOP
        -- The group's ready row first, free, or none: a row a receiver holds (or has
        -- deleted and not yet committed) would make the message wait for that receiver.
        -- (One statement: the row locked if free, and whether there is one at all.)
        IF (SELECT x.present AND x.locked IS NULL
              FROM (SELECT (SELECT true FROM sb.group_ready r WHERE r.group_id = t.group_id
                             FOR UPDATE SKIP LOCKED) AS locked,
                           EXISTS (SELECT 1 FROM sb.group_ready r WHERE r.group_id = t.group_id) AS present) x) THEN
            CONTINUE;
        END IF;
        -- Then the timer, and the endpoint against its end and its move (they lock it FOR
        -- UPDATE; a SEND does not conflict), each as it stands now.
        PERFORM 1 FROM sb.conversation_timer
         WHERE handle = t.handle AND due_at <= statement_timestamp() FOR UPDATE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        PERFORM 1 FROM sb.endpoint
         WHERE handle = t.handle AND group_id = t.group_id AND state NOT IN ('DO', 'CD') FOR KEY SHARE SKIP LOCKED;
        IF NOT FOUND THEN
            CONTINUE;
        END IF;
        DELETE FROM sb.conversation_timer WHERE handle = t.handle;
        PERFORM sb.put_message(p_queue, t.queue_id, t.group_id, t.handle, 0,
                               'http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer', NULL, t.priority);
        v_n := v_n + 1;
    END LOOP;
    RETURN v_n;
END $$;

-- Whether a SEND on p_handle from this side can go now without waiting for the other
-- side's receiver, taking what it needs as sb.send would (this side FOR NO KEY UPDATE,
-- the other FOR KEY SHARE, in handle order) and the other side's group's ready row when
-- it is free (held until commit, so that no receiver takes the group meanwhile): true
-- when both sides are open and the other side's group is not held by a receiver. A
-- sender that reuses a dialog asks first, and begins a new one on false: a receiver
-- holds its group for its whole transaction, and a SEND into a held group waits for it.
CREATE OR REPLACE FUNCTION sb.ready_to_send(p_handle uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_far   uuid;
    v_group uuid;
    v_route text;
BEGIN
    SELECT far_handle, route INTO v_far, v_route FROM sb.endpoint WHERE handle = p_handle;
    IF v_far IS NULL THEN
        RETURN false;
    END IF;
    IF v_route IS NOT NULL THEN
        -- The far side is in another database: a send waits for nobody there.
        PERFORM 1 FROM sb.endpoint WHERE handle = p_handle AND state IN ('SO', 'CO') FOR NO KEY UPDATE;
        RETURN FOUND;
    END IF;
    IF v_far < p_handle THEN
        SELECT group_id INTO v_group FROM sb.endpoint WHERE handle = v_far AND state IN ('SI', 'CO') FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    PERFORM 1 FROM sb.endpoint WHERE handle = p_handle AND state IN ('SO', 'CO') FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_far > p_handle THEN
        SELECT group_id INTO v_group FROM sb.endpoint WHERE handle = v_far AND state IN ('SI', 'CO') FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    PERFORM 1 FROM sb.group_ready WHERE group_id = v_group FOR UPDATE SKIP LOCKED;
    RETURN FOUND OR NOT EXISTS (SELECT 1 FROM sb.group_ready WHERE group_id = v_group);
END $$;

-- sb.ready_to_send and then the SEND, for the roster's send on a reused dialog, in one
-- pass: each row locked once, in handle order (this side FOR NO KEY UPDATE, the other
-- FOR KEY SHARE, then the other side's ready row if free), and read as it is locked.
-- False, sending nothing, when the dialog cannot take it now: an end on either side,
-- another contract, a LIFETIME ending before p_min_expiry, the other side's group held
-- by a receiver. With p_trusted the body is not validated (sb.send_as). A dialog over
-- a route takes the two steps. Granted to no
-- role (006_security.sql): rekenserver.stuur_vraag calls it.
DROP FUNCTION IF EXISTS sb.send_if_ready(uuid, text, bytea, text, timestamptz);
CREATE OR REPLACE FUNCTION sb.send_if_ready(p_handle uuid, p_message_type text, p_body bytea, p_contract text,
    p_min_expiry timestamptz, p_trusted boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_void  text;
    e       sb.endpoint;
    f       sb.endpoint;
    c       record;
    v_far   uuid;
    v_route text;
    v_seq   bigint;
BEGIN
    SELECT far_handle, route INTO v_far, v_route FROM sb.endpoint WHERE handle = p_handle;
    IF v_far IS NULL THEN
        RETURN false;
    END IF;
    IF v_route IS NOT NULL THEN
        IF NOT EXISTS (SELECT 1 FROM sb.endpoint WHERE handle = p_handle AND contract = p_contract
                          AND (expires_at IS NULL OR expires_at > p_min_expiry))
           OR NOT sb.ready_to_send(p_handle) THEN
            RETURN false;
        END IF;
        v_void := sb.send_as(p_handle, p_message_type, p_body, p_trusted)::text;
        RETURN true;
    END IF;
    IF v_far < p_handle THEN
        SELECT * INTO f FROM sb.endpoint WHERE handle = v_far AND state IN ('SI', 'CO') FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    SELECT * INTO e FROM sb.endpoint
     WHERE handle = p_handle AND state IN ('SO', 'CO') AND contract = p_contract
       AND (expires_at IS NULL OR expires_at > p_min_expiry)
       FOR NO KEY UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF v_far > p_handle THEN
        SELECT * INTO f FROM sb.endpoint WHERE handle = v_far AND state IN ('SI', 'CO') FOR KEY SHARE;
        IF NOT FOUND THEN
            RETURN false;
        END IF;
    END IF;
    -- The other side's group: its ready row locked if free; held by a receiver, not ready.
    IF (SELECT x.present AND x.locked IS NULL
          FROM (SELECT (SELECT true FROM sb.group_ready r WHERE r.group_id = f.group_id
                         FOR UPDATE SKIP LOCKED) AS locked,
                       EXISTS (SELECT 1 FROM sb.group_ready r WHERE r.group_id = f.group_id) AS present) x) THEN
        RETURN false;
    END IF;
    -- The SEND (sb.send_as), on the rows locked above.
    c := sb.send_checks(e, p_message_type, p_body, p_trusted);
    UPDATE sb.endpoint SET state = CASE WHEN state = 'SO' THEN 'CO' ELSE state END, send_seq = send_seq + 1
     WHERE handle = e.handle RETURNING send_seq INTO v_seq;
    v_void := sb.put_message(c.queue, c.queue_id, f.group_id, f.handle, v_seq, p_message_type, p_body, f.priority)::text;
    RETURN true;
END $$;

-- Receiving -------------------------------------------------------------------------------

-- A hint per queue of where its oldest ready group lies, kept in a sequence (setval is
-- not transactional and leaves no dead rows). With another transaction pinning xmin,
-- the dead index entries at the head of group_ready cannot be removed, and a search
-- from the start would walk them all on every receive; searching from the floor skips
-- them. The floor is raised one look in 8 (a probe and a setval, each a statement and
-- the setval a WAL record: on every look they were about 5 statements a request). A row
-- can still appear below the floor (a send that commits late with a lower id, a
-- rolled-back receive, a move): one search in 64, and every search that finds nothing,
-- starts from the beginning, so no group waits long.
CREATE SEQUENCE IF NOT EXISTS sb.floor_tick CYCLE;

-- Creates the floor sequence of a queue (at CREATE QUEUE time: never inside a receive,
-- where DDL would make concurrent receivers wait on each other's transactions).
CREATE OR REPLACE FUNCTION sb.create_floor_seq(p_queue_id int) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('CREATE SEQUENCE IF NOT EXISTS sb.queue_floor_%s MINVALUE 0 START 0', p_queue_id);
END $$;

-- Locks the next available conversation group of a queue (or the given one) until the
-- end of the transaction; NULL when none is available. With p_check_right, checks the
-- login's RECEIVE right first (42501), in the same look as the queue. A hot path (every
-- RECEIVE): one statement reads the queue, the right, the levels defined and whether a
-- conversation timer is due; then the floor's probe (one look in 8), and one search per
-- level until a group is found (one with no priority defined).
-- p_mark folds a receiver's waiting mark into the look (see sb.begin_wait): 1 drops the
-- session's mark first (sb.end_wait), 2 takes it after the look and before the search
-- (sb.begin_wait), o_gate_free then saying whether no send was in flight; 0 neither.
-- (A name of its own, without defaults: an older release's install run after this one
-- makes its sb.lock_group(text, uuid) again, and a second function of that name with
-- defaults would make its callers' calls ambiguous, 42725.)
DROP FUNCTION IF EXISTS sb.lock_group(text, uuid);
DROP FUNCTION IF EXISTS sb.lock_group(text, uuid, boolean);
DROP FUNCTION IF EXISTS sb.pick_group(text, uuid, boolean);
CREATE OR REPLACE FUNCTION sb.pick_group(p_queue text, p_group uuid, p_check_right boolean, p_mark smallint,
    OUT o_group uuid, OUT o_gate_free boolean, OUT o_queue_id int)
LANGUAGE plpgsql AS $$
DECLARE
    q         record;
    v_group   uuid;
    v_below   uuid;
    v_tick    bigint;
    v_void    text;
    v_seq     regclass;
    v_floor   bigint := 0;
    v_min     bigint;
    v_level   smallint;
BEGIN
    SELECT x.id, x.enabled, NOT p_check_right OR sb.may('RECEIVE', p_queue) AS allowed,
           -- The levels to search, highest first: 5 (every endpoint's without a
           -- priority) and those of the priorities defined.
           ARRAY(SELECT l FROM (SELECT bp.priority_level FROM sb.broker_priority bp UNION SELECT 5) y(l)
                  ORDER BY l DESC) AS levels,
           p_group IS NULL AND EXISTS (SELECT 1 FROM sb.conversation_timer t
                                        WHERE t.queue = p_queue AND t.due_at <= statement_timestamp()) AS timer_due
      INTO q FROM sb.queue x WHERE x.name = p_queue;
    IF NOT FOUND THEN
        IF p_check_right THEN
            IF NOT sb.may('RECEIVE', p_queue) THEN
                PERFORM sb.require_right('RECEIVE', p_queue);
            END IF;
        END IF;
        PERFORM sb.fail('SB404', format('queue %s is not found', p_queue));
    END IF;
    IF NOT q.allowed THEN
        IF NOT sb.may('RECEIVE', p_queue) THEN
            PERFORM sb.require_right('RECEIVE', p_queue);
        END IF;
    END IF;
    IF NOT q.enabled THEN
        PERFORM sb.fail('SB617', format('the service queue %s is currently disabled', p_queue));
    END IF;
    o_queue_id := q.id;
    -- The waiting mark (session-level advisory locks: not undone by a rollback), taken
    -- before the search's statement, whose snapshot is then taken after it.
    IF p_mark = 1 THEN
        v_void := pg_advisory_unlock_shared(1396834305, q.id)::text;
    ELSIF p_mark = 2 THEN
        v_void := pg_advisory_lock_shared(1396834305, q.id)::text;
        o_gate_free := sb.lock_is_free(1396834306, q.id);
    END IF;
    IF p_group IS NOT NULL THEN
        SELECT group_id INTO o_group FROM sb.group_ready
         WHERE group_id = p_group AND queue = p_queue FOR UPDATE SKIP LOCKED;
        RETURN;
    END IF;
    -- Conversation timers that are due become DialogTimer messages first.
    IF q.timer_due THEN
        PERFORM sb.fire_timers(p_queue);
    END IF;
    v_seq := to_regclass('sb.queue_floor_' || q.id);
    v_tick := nextval('sb.floor_tick');
    IF v_seq IS NOT NULL AND v_tick % 64 <> 0 THEN
        v_floor := coalesce(pg_sequence_last_value(v_seq), 0);
        -- One look in 8: the oldest visible ready row from the floor on, of any level,
        -- locked or not, raises the floor. (A hint: a floor a few looks behind the head
        -- costs a search the few dead entries in between.)
        IF v_tick % 8 = 0 THEN
            SELECT min(f.first_id) INTO v_min
              FROM unnest(q.levels) AS l(level),
                   LATERAL (SELECT r.first_id FROM sb.group_ready r
                             WHERE r.queue = p_queue AND r.priority = l.level AND r.first_id >= v_floor
                             ORDER BY r.first_id LIMIT 1) f;
            IF v_min > v_floor THEN
                v_void := setval(v_seq, v_min)::text;
                v_floor := v_min;
            END IF;
        END IF;
    END IF;
    -- The highest level first, each level oldest first (the floor is below every
    -- level's oldest row, so it bounds each level's search too). One statement a level:
    -- from the floor, and when nothing is found there and the floor is above 0, from
    -- the start (a row below the floor: see sb.floor_tick), the floor then put back to 0.
    FOREACH v_level IN ARRAY q.levels LOOP
        SELECT f.g, s.g INTO v_group, v_below
          -- (OFFSET 0: f must stay a subquery of its own, evaluated once. Flattened, its
          -- locking search would be copied into the CASE and run twice, and could lock
          -- a second group, freed in between, that it does not return.)
          FROM (SELECT (SELECT r.group_id FROM sb.group_ready r
                         WHERE r.queue = p_queue AND r.priority = v_level AND r.first_id >= v_floor
                         ORDER BY r.first_id LIMIT 1 FOR UPDATE SKIP LOCKED) AS g OFFSET 0) f,
               LATERAL (SELECT CASE WHEN f.g IS NULL AND v_floor > 0 THEN
                            (SELECT r.group_id FROM sb.group_ready r
                              WHERE r.queue = p_queue AND r.priority = v_level
                              ORDER BY r.first_id LIMIT 1 FOR UPDATE SKIP LOCKED) END AS g) s;
        IF v_below IS NOT NULL THEN
            IF v_seq IS NOT NULL THEN
                v_void := setval(v_seq, 0)::text;
            END IF;
            o_group := v_below;
            RETURN;
        END IF;
        IF v_group IS NOT NULL THEN
            o_group := v_group;
            RETURN;
        END IF;
    END LOOP;
END $$;

CREATE OR REPLACE FUNCTION sb.get_conversation_group(p_queue text)
RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    RETURN (sb.pick_group(p_queue, NULL, true, 0::smallint)).o_group;
END $$;

-- RECEIVE: the messages of exactly one conversation group, in conversation and sequence
-- order, at most p_max; within a conversation its DialogTimer first, then its Error,
-- whatever order they arrived in, as Service Broker returns them ("Broker System
-- Messages": the other messages can still be received after the Error). The group stays locked to the end of the transaction. With
-- p_handle (WHERE conversation_handle = h), only that conversation's messages.
-- When messages are left in the group, waiting receivers are woken at commit (the group
-- becomes free then), unless p_wake is false: a receiver that comes straight back for
-- more (sbworker's readers) serves the group itself, and the wake-up would cost every
-- listening session a transaction for nothing (measured: 4 per message with 4 readers).
-- sb.receive is made below, over sb.receive_marking, which does the work; sbworker's
-- transport calls that directly, with its waiting mark folded in.
DROP FUNCTION IF EXISTS sb.receive(text, int, uuid);
DROP FUNCTION IF EXISTS sb.receive(text, int, uuid, uuid);

-- sb.receive with the receiver's waiting mark in the same statement (a statement sent
-- less each time a receiver begins or ends a wait; the protocol is at sb.wake): p_mark 1
-- drops the session's mark before it looks (sb.end_wait), 2 takes it before it looks
-- (sb.begin_wait) and drops it again when messages are found. With 2 and nothing found
-- the mark stays and one row comes back with no message (message_id NULL) and
-- gate_free, sb.begin_wait's answer; gate_free is NULL on every other row. With 0 it is
-- sb.receive. Every mark is also dropped when the session ends.
-- (No defaults: the transport passes every argument.)
CREATE OR REPLACE FUNCTION sb.receive_marking(p_queue text, p_max int, p_group uuid, p_handle uuid,
    p_wake boolean, p_mark smallint)
RETURNS TABLE (message_id bigint, conversation_group_id uuid, conversation_handle uuid,
               message_sequence_number bigint, message_type_name text, message_body bytea,
               service_name text, service_contract_name text, gate_free boolean)
LANGUAGE plpgsql AS $$
DECLARE
    v_group uuid := p_group;
    v_pick  record;
    v_void  text;
BEGIN
    IF p_handle IS NOT NULL THEN
        IF NOT sb.may('RECEIVE', p_queue) THEN
            PERFORM sb.require_right('RECEIVE', p_queue);
        END IF;
        SELECT group_id INTO v_group FROM sb.endpoint WHERE handle = p_handle;
        IF NOT FOUND THEN
            PERFORM sb.fail('SB426', format('the conversation handle %s is not found', p_handle));
        END IF;
    END IF;
    v_pick := sb.pick_group(p_queue, v_group, p_handle IS NULL, p_mark);
    v_group := v_pick.o_group;
    IF v_group IS NULL THEN
        IF p_mark = 2 THEN
            gate_free := v_pick.o_gate_free;
            RETURN NEXT;
        END IF;
        RETURN;
    END IF;
    -- One statement takes the messages and puts the group right: a target endpoint
    -- that has received its first message is conversing; the group's ready row moves to
    -- its next message (its level to the highest left, when priorities are defined), or
    -- goes when none is left. Every part sees the statement's snapshot, so what is left
    -- is what was not picked. (A sender's message not yet committed is not seen: its
    -- upsert of the ready row waits for this transaction, see sb.put_message.)
    RETURN QUERY
    WITH picked AS (
        SELECT m.id FROM sb.message m
         WHERE m.group_id = v_group AND (p_handle IS NULL OR m.handle = p_handle)
         ORDER BY min(m.id) OVER (PARTITION BY m.handle), m.handle,
                  m.message_type <> 'http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer',
                  m.message_type <> 'http://schemas.microsoft.com/SQL/ServiceBroker/Error', m.seq
         LIMIT p_max
    ), gone AS (
        DELETE FROM sb.message m USING picked WHERE m.group_id = v_group AND m.id = picked.id
        RETURNING m.id, m.group_id, m.handle, m.seq, m.message_type, m.body
    ), conversing AS (
        UPDATE sb.endpoint SET state = 'CO' WHERE group_id = v_group AND state = 'SI'
    ), nxt AS (
        SELECT m.id FROM sb.message m
         WHERE m.group_id = v_group AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.id = m.id)
         ORDER BY m.id LIMIT 1
    ), lvl AS (
        SELECT max(m.priority) AS level FROM sb.message m
         WHERE EXISTS (SELECT 1 FROM sb.broker_priority) AND m.group_id = v_group
           AND NOT EXISTS (SELECT 1 FROM picked p WHERE p.id = m.id)
    ), ready AS (
        UPDATE sb.group_ready r SET first_id = nxt.id, priority = coalesce(lvl.level, r.priority)
          FROM nxt, lvl WHERE r.group_id = v_group
    ), unready AS (
        DELETE FROM sb.group_ready r WHERE r.group_id = v_group AND NOT EXISTS (SELECT 1 FROM nxt)
    )
    SELECT g.id, g.group_id, g.handle, g.seq, g.message_type, g.body, e.service, e.contract, NULL::boolean
      FROM gone g JOIN sb.endpoint e ON e.handle = g.handle
     ORDER BY min(g.id) OVER (PARTITION BY g.handle), g.handle,
              g.message_type <> 'http://schemas.microsoft.com/SQL/ServiceBroker/DialogTimer',
              g.message_type <> 'http://schemas.microsoft.com/SQL/ServiceBroker/Error', g.seq;
    -- (A group locked with nothing to take, which the ready rows should not allow,
    -- answers as nothing found: the mark stays.)
    IF p_mark = 2 THEN
        IF FOUND THEN
            v_void := pg_advisory_unlock_shared(1396834305, v_pick.o_queue_id)::text;
        ELSE
            gate_free := v_pick.o_gate_free;
            RETURN NEXT;
        END IF;
    END IF;
    -- Messages are left: wake another reader once this transaction ends.
    IF p_wake THEN
        IF EXISTS (SELECT 1 FROM sb.group_ready WHERE group_id = v_group) THEN
            v_void := sb.wake_id(v_pick.o_queue_id)::text;
        END IF;
    END IF;
END $$;

-- (After sb.receive_marking: a SQL function's body is checked when it is made.)
CREATE OR REPLACE FUNCTION sb.receive(p_queue text, p_max int DEFAULT 1000000, p_group uuid DEFAULT NULL,
    p_handle uuid DEFAULT NULL, p_wake boolean DEFAULT true)
RETURNS TABLE (message_id bigint, conversation_group_id uuid, conversation_handle uuid,
               message_sequence_number bigint, message_type_name text, message_body bytea,
               service_name text, service_contract_name text)
LANGUAGE sql AS $$
    SELECT m.message_id, m.conversation_group_id, m.conversation_handle, m.message_sequence_number,
           m.message_type_name, m.message_body, m.service_name, m.service_contract_name
      FROM sb.receive_marking(p_queue, p_max, p_group, p_handle, p_wake, 0::smallint) m
$$;

-- Poison detection. PostgreSQL has no autonomous transactions, so a count written by
-- the receiving transaction would roll back with it: the transport calls this, in a
-- transaction of its own, after rolling back a transaction that had received these
-- messages (by group and id, pairwise: the messages' key). Five rollbacks in a row of
-- one message disable its queue when the queue's poison-message handling is on (SQL
-- Server's rule). Returns true when it disabled it.
CREATE OR REPLACE FUNCTION sb.note_rollback(p_groups uuid[], p_message_ids bigint[])
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    v_queue text;
    v_disabled boolean := false;
BEGIN
    PERFORM sb.require_right('RECEIVE', q)
       FROM (SELECT DISTINCT m.queue AS q FROM sb.message m
               JOIN unnest(p_groups, p_message_ids) AS k(g, id) ON m.group_id = k.g AND m.id = k.id) s;
    FOR v_queue IN
        WITH bumped AS (
            UPDATE sb.message m SET rollbacks = m.rollbacks + 1
              FROM unnest(p_groups, p_message_ids) AS k(g, id)
             WHERE m.group_id = k.g AND m.id = k.id
            RETURNING m.queue, m.rollbacks
        )
        SELECT DISTINCT b.queue FROM bumped b WHERE b.rollbacks >= 5
    LOOP
        UPDATE sb.queue SET enabled = false WHERE name = v_queue AND poison_handling AND enabled;
        v_disabled := v_disabled OR FOUND;
    END LOOP;
    -- The messages are available again: wake waiting readers.
    PERFORM pg_notify(sb.channel(q), '')
       FROM (SELECT DISTINCT m.queue AS q FROM sb.message m
               JOIN unnest(p_groups, p_message_ids) AS k(g, id) ON m.group_id = k.g AND m.id = k.id) s;
    RETURN v_disabled;
END $$;

-- The same by ids alone, as workers of the releases before call it (upgraded first,
-- they run against this install for a while): their groups are looked up by a scan of
-- the messages, a rollback's price only.
CREATE OR REPLACE FUNCTION sb.note_rollback(p_message_ids bigint[])
RETURNS boolean LANGUAGE sql AS $$
    SELECT coalesce(sb.note_rollback(array_agg(m.group_id), array_agg(m.id)), false)
      FROM sb.message m WHERE m.id = ANY (p_message_ids)
$$;

-- Ending ----------------------------------------------------------------------------------

-- Removes both endpoints of a conversation that both sides have ended (by their
-- handles: the primary key, where the conversation id has no index), and their groups
-- when nothing else uses them. p_far is NULL when the far side never existed.
DROP FUNCTION IF EXISTS sb.cleanup(uuid);
CREATE OR REPLACE FUNCTION sb.cleanup(p_handle uuid, p_far uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void   text;
    v_groups uuid[];
BEGIN
    WITH gone AS (DELETE FROM sb.endpoint WHERE handle IN (p_handle, p_far) RETURNING group_id)
    SELECT array_agg(DISTINCT group_id) INTO v_groups FROM gone;
    v_void := sb.drop_unused_groups(v_groups)::text;
END $$;

-- END CONVERSATION … WITH CLEANUP: removes this side's endpoint and the messages waiting
-- for it, and tells the other side nothing (it ends on its own, or by LIFETIME).
CREATE OR REPLACE FUNCTION sb.end_conversation_cleanup(p_handle uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void   text;
    e sb.endpoint;
BEGIN
    e := sb.lock_endpoint(p_handle);
    PERFORM sb.require_right('RECEIVE', (SELECT queue FROM sb.service WHERE name = e.service));
    DELETE FROM sb.message WHERE group_id = e.group_id AND handle = p_handle;
    DELETE FROM sb.endpoint WHERE handle = p_handle;
    IF NOT EXISTS (SELECT 1 FROM sb.message WHERE group_id = e.group_id) THEN
        PERFORM sb.drop_ready_if_empty(e.group_id);
    END IF;
    v_void := sb.drop_unused_groups(ARRAY[e.group_id])::text;
END $$;

-- The body of Service Broker's Error message: code and description (escaped for XML).
CREATE OR REPLACE FUNCTION sb.error_body(p_code int, p_description text) RETURNS bytea
LANGUAGE sql IMMUTABLE AS $$
    SELECT convert_to('<Error xmlns="http://schemas.microsoft.com/SQL/ServiceBroker/Error"><Code>'
        || p_code || '</Code><Description>'
        || replace(replace(replace(coalesce(p_description, ''), '&', '&amp;'), '<', '&lt;'), '>', '&gt;')
        || '</Description></Error>', 'UTF8')
$$;

-- END CONVERSATION [WITH ERROR = code DESCRIPTION = description].
CREATE OR REPLACE FUNCTION sb.end_conversation(p_handle uuid, p_error_code int DEFAULT NULL,
    p_description text DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void   text;
    e       sb.endpoint;
    v_far   sb.endpoint;
    c       record;
    v_own   text;
    v_queue text;
    v_qid   int;
    v_seq   bigint;
    v_type  text;
    v_body  bytea;
    v_state text;
BEGIN
    -- (Assignments, not queries, where a value is all that is wanted; and the two
    -- sides' queues in one look: END runs twice a dialog.)
    c := sb.lock_conversation(p_handle);
    e := c.e;
    v_far := c.far;
    SELECT (SELECT own.queue FROM sb.service own WHERE own.name = e.service), q.name, q.id
      INTO v_own, v_queue, v_qid
      FROM (SELECT) one
      LEFT JOIN (sb.service s JOIN sb.queue q ON q.name = s.queue) ON s.name = v_far.service;
    IF NOT sb.may('RECEIVE', v_own) THEN
        PERFORM sb.require_right('RECEIVE', v_own);
    END IF;
    IF e.state IN ('DO', 'CD') THEN
        PERFORM sb.fail('SB429', format('the conversation endpoint %s is already ended (state %s)', p_handle, e.state));
    END IF;
    -- Messages of this conversation not yet received here are discarded (and the
    -- group's ready row with them when they were its last).
    DELETE FROM sb.message WHERE group_id = e.group_id AND handle = p_handle;
    IF FOUND THEN
        IF NOT EXISTS (SELECT 1 FROM sb.message WHERE group_id = e.group_id) THEN
            PERFORM sb.drop_ready_if_empty(e.group_id);
        END IF;
    END IF;
    IF e.route IS NOT NULL THEN
        PERFORM sb.end_remote(e, p_error_code, p_description);
        RETURN;
    END IF;
    IF e.far_handle IS NULL OR v_far.handle IS NULL
       OR v_far.state IN ('DI', 'ER', 'DO', 'CD') AND e.state IN ('DI', 'ER') THEN
        -- (Both sides in ER after an expired LIFETIME end the same way: the first to end
        -- goes to CD, the second finds it there and removes the conversation.)
        -- The far side has ended already (or never existed): the conversation is over.
        IF e.far_handle IS NULL OR v_far.handle IS NULL OR v_far.state IN ('DO', 'CD') THEN
            v_void := sb.cleanup(e.handle, e.far_handle)::text;
        ELSE
            UPDATE sb.endpoint SET state = 'CD' WHERE handle = e.handle;
        END IF;
        RETURN;
    END IF;
    IF p_error_code IS NULL THEN
        v_type := 'http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog';
        v_state := 'DI';
    ELSE
        v_type := 'http://schemas.microsoft.com/SQL/ServiceBroker/Error';
        v_body := sb.error_body(p_error_code, p_description);
        v_state := 'ER';
    END IF;
    -- In one statement: the far side disconnected inbound (DI), or errored (ER), if it
    -- was still conversing; this side disconnected outbound, and the message counts in
    -- its sequence.
    WITH ended AS (
        UPDATE sb.endpoint
           SET state = CASE WHEN handle = e.handle THEN 'DO' ELSE v_state END,
               send_seq = send_seq + CASE WHEN handle = e.handle THEN 1 ELSE 0 END
         WHERE handle = e.handle OR handle = e.far_handle AND state IN ('SI', 'CO')
        RETURNING handle, send_seq
    )
    SELECT send_seq INTO v_seq FROM ended WHERE handle = e.handle;
    v_void := sb.put_message(v_queue, v_qid, v_far.group_id, v_far.handle, v_seq, v_type, v_body, v_far.priority)::text;
END $$;

-- Dialogs past their LIFETIME: as in Service Broker, both sides get an Error message
-- (code -8489) and their endpoints go to ER; each side then ends its conversation. The
-- lifetime is the initiator's to enforce: when the target is gone (ended WITH CLEANUP),
-- the initiator still hears of it, from the broker itself, so a lost dialog always
-- surfaces at its sender. Called by the sweep (sbworker sweep); returns how many
-- dialogs it expired.
CREATE OR REPLACE FUNCTION sb.expire_dialogs() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_handle uuid;
    c        record;
    v_queue  text;
    v_qid    int;
    v_seq    bigint;
    v_n      int := 0;
    v_type   text := 'http://schemas.microsoft.com/SQL/ServiceBroker/Error';
    v_body   bytea := sb.error_body(-8489, 'The dialog has exceeded the specified LIFETIME.');
BEGIN
    FOR v_handle IN
        SELECT handle FROM sb.endpoint
         WHERE is_initiator AND expires_at < now() AND state IN ('SO', 'SI', 'CO', 'DI')
    LOOP
        -- Both endpoints, in handle order, without waiting: a conversation a worker is
        -- busy with is left for the next run. Waiting here could deadlock with a worker
        -- that holds one endpoint and waits for the other.
        BEGIN
            PERFORM 1 FROM sb.endpoint
             WHERE handle = v_handle OR handle = (SELECT far_handle FROM sb.endpoint WHERE handle = v_handle)
             ORDER BY handle FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE;
        END;
        IF NOT EXISTS (SELECT 1 FROM sb.endpoint WHERE handle = v_handle) THEN
            CONTINUE;   -- ended and removed since it was listed
        END IF;
        SELECT * INTO c FROM sb.lock_conversation(v_handle);
        -- Read again under the locks: the worker may have ended it meanwhile.
        IF (c.e).handle IS NULL OR NOT ((c.e).expires_at < now() AND (c.e).state IN ('SO', 'SI', 'CO', 'DI')) THEN
            CONTINUE;
        END IF;
        IF (c.far).handle IS NOT NULL THEN
            IF (c.far).state IN ('SO', 'SI', 'CO', 'DI') THEN
                -- The target hears it from the initiator's side.
                PERFORM sb.enqueue(c.e, v_type, v_body);
                UPDATE sb.endpoint SET state = 'ER' WHERE handle = (c.far).handle;
            END IF;
            -- The initiator hears it from the target's side.
            PERFORM sb.enqueue(c.far, v_type, v_body);
        ELSE
            -- The target is in another database: it hears it over the route.
            IF (c.e).route IS NOT NULL AND (c.e).far_handle IS NOT NULL THEN
                UPDATE sb.endpoint SET send_seq = send_seq + 1 WHERE handle = v_handle RETURNING send_seq INTO v_seq;
                PERFORM sb.transmit(c.e, v_seq, v_type, v_body);
            END IF;
            -- No target endpoint here: the broker tells the initiator itself, numbered after
            -- anything the target sent it before it went.
            SELECT q.name, q.id INTO v_queue, v_qid
              FROM sb.service s JOIN sb.queue q ON q.name = s.queue WHERE s.name = (c.e).service;
            SELECT coalesce(max(seq), 0) + 1 INTO v_seq FROM sb.message
             WHERE group_id = (c.e).group_id AND handle = v_handle;
            PERFORM sb.put_message(v_queue, v_qid, (c.e).group_id, v_handle, v_seq, v_type, v_body, (c.e).priority);
        END IF;
        UPDATE sb.endpoint SET state = 'ER' WHERE handle = v_handle;
        v_n := v_n + 1;
    END LOOP;
    -- A target whose initiator is in another database: the initiator's side tells it at
    -- the LIFETIME's end, unless that side is gone (ended with cleanup, its database
    -- replaced); so this side ends it too, as each side of a Service Broker dialog does.
    FOR v_handle IN
        SELECT handle FROM sb.endpoint
         WHERE NOT is_initiator AND route IS NOT NULL AND expires_at < now() AND state IN ('SO', 'SI', 'CO', 'DI')
    LOOP
        -- Without waiting, as above: one a worker is busy with (its endpoint, or its group,
        -- which a reader holds from its receive to its commit) is left for the next run.
        BEGIN
            PERFORM 1 FROM sb.endpoint WHERE handle = v_handle FOR UPDATE NOWAIT;
            PERFORM 1 FROM sb.group_ready
             WHERE group_id = (SELECT group_id FROM sb.endpoint WHERE handle = v_handle) FOR UPDATE NOWAIT;
        EXCEPTION WHEN lock_not_available THEN
            CONTINUE;
        END;
        IF NOT EXISTS (SELECT 1 FROM sb.endpoint WHERE handle = v_handle) THEN
            CONTINUE;   -- ended and removed since it was listed
        END IF;
        SELECT * INTO c FROM sb.lock_conversation(v_handle);
        IF (c.e).handle IS NULL OR NOT ((c.e).expires_at < now() AND (c.e).state IN ('SO', 'SI', 'CO', 'DI')) THEN
            CONTINUE;
        END IF;
        SELECT q.name, q.id INTO v_queue, v_qid
          FROM sb.service s JOIN sb.queue q ON q.name = s.queue WHERE s.name = (c.e).service;
        SELECT coalesce(max(seq), 0) + 1 INTO v_seq FROM sb.message
         WHERE group_id = (c.e).group_id AND handle = v_handle;
        PERFORM sb.put_message(v_queue, v_qid, (c.e).group_id, v_handle, v_seq, v_type, v_body, (c.e).priority);
        UPDATE sb.endpoint SET state = 'ER' WHERE handle = v_handle;
        v_n := v_n + 1;
    END LOOP;
    -- A remote dialog this side ended whose far side never answered it (it was ended
    -- there with cleanup, or its database replaced): gone at its lifetime's end.
    FOR v_handle IN
        SELECT handle FROM sb.endpoint WHERE route IS NOT NULL AND state = 'DO' AND expires_at < now()
    LOOP
        PERFORM sb.forget(v_handle);
    END LOOP;
    RETURN v_n;
END $$;

-- ALTER DATABASE ... SET NEW_BROKER: every conversation removed at once, its endpoints,
-- groups and messages, with no message to either side. For a copy of a database
-- (a test or staging environment) that must not carry on its original's dialogs. Not
-- granted to any role: the owner runs it. The requests it cuts off have no outcome in
-- the calculation log; rekenserver.markeer_verloren (the sweep runs it) marks them, so
-- the sweep sends their keys again.
CREATE OR REPLACE FUNCTION sb.new_broker() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    LOCK TABLE sb.endpoint, sb.message, sb.group_ready, sb.conversation_group IN EXCLUSIVE MODE;
    DELETE FROM sb.message;
    DELETE FROM sb.group_ready;
    DELETE FROM sb.endpoint WHERE is_initiator;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    DELETE FROM sb.endpoint;
    DELETE FROM sb.conversation_group;
    -- A new broker id, as SQL Server's: routes of far databases that name the old one no
    -- longer lead here.
    UPDATE sb.broker_instance SET id = gen_random_uuid();
    RETURN v_n;
END $$;

-- MOVE CONVERSATION handle TO group (a group of the same queue; created if new).
CREATE OR REPLACE FUNCTION sb.move_conversation(p_handle uuid, p_group uuid)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_void   text;
    e       sb.endpoint;
    v_queue text;
    v_gqueue text;
    v_first bigint;
    v_level smallint;
BEGIN
    SELECT * INTO e FROM sb.endpoint WHERE handle = p_handle FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM sb.fail('SB426', format('the conversation handle %s is not found', p_handle));
    END IF;
    SELECT queue INTO v_queue FROM sb.service WHERE name = e.service;
    IF NOT sb.may('RECEIVE', v_queue) THEN
        PERFORM sb.require_right('RECEIVE', v_queue);
    END IF;
    v_gqueue := sb.hold_group(p_group, v_queue);
    IF v_gqueue <> v_queue THEN
        PERFORM sb.fail('SB409', format('conversation group %s belongs to queue %s, not %s', p_group, v_gqueue, v_queue));
    END IF;
    UPDATE sb.endpoint SET group_id = p_group WHERE handle = p_handle;
    UPDATE sb.message SET group_id = p_group WHERE group_id = e.group_id AND handle = p_handle;
    -- Keep the ready rows of both groups right.
    SELECT min(m.id), max(x.priority) INTO v_first, v_level
      FROM sb.message m JOIN sb.endpoint x ON x.handle = m.handle WHERE m.group_id = e.group_id;
    IF v_first IS NULL THEN
        DELETE FROM sb.group_ready WHERE group_id = e.group_id;
    ELSE
        UPDATE sb.group_ready SET first_id = v_first, priority = v_level WHERE group_id = e.group_id;
    END IF;
    SELECT min(m.id), max(x.priority) INTO v_first, v_level
      FROM sb.message m JOIN sb.endpoint x ON x.handle = m.handle WHERE m.group_id = p_group;
    IF v_first IS NOT NULL THEN
        INSERT INTO sb.group_ready (group_id, queue, first_id, priority) VALUES (p_group, v_queue, v_first, v_level)
        ON CONFLICT (group_id) DO UPDATE SET first_id = excluded.first_id, priority = excluded.priority;
        -- The group may have had no messages: it is ready at commit, so a waiting
        -- receiver is told (the caller holds it until then).
        PERFORM sb.wake_group(sb.queue_id(v_queue), p_group);
    END IF;
    IF e.group_id <> p_group THEN
        v_void := sb.drop_unused_groups(ARRAY[e.group_id])::text;
    END IF;
END $$;

-- The state of a queue for a receiver: enabled, the messages waiting, whether poison
-- detection is on. No row for a queue that does not exist.
CREATE OR REPLACE FUNCTION sb.queue_state(p_queue text)
RETURNS TABLE (enabled boolean, messages bigint, poison_handling boolean)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sb.queue q WHERE q.name = p_queue) THEN
        RETURN;
    END IF;
    IF NOT sb.may('RECEIVE', p_queue) THEN
        PERFORM sb.require_right('RECEIVE', p_queue);
    END IF;
    RETURN QUERY SELECT q.enabled, (SELECT count(*) FROM sb.message m WHERE m.queue = q.name), q.poison_handling
                   FROM sb.queue q WHERE q.name = p_queue;
END $$;

-- The most readers the database allows on a queue across every worker process and host
-- (SQL Server's MAX_QUEUE_READERS), 0 for no limit: workers honour it live, each reader
-- holding a slot (an advisory lock) while it reads. NULL: no such queue.
CREATE OR REPLACE FUNCTION sb.queue_max_readers(p_queue text)
RETURNS int LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM sb.queue q WHERE q.name = p_queue) THEN
        RETURN NULL;
    END IF;
    IF NOT sb.may('RECEIVE', p_queue) THEN
        PERFORM sb.require_right('RECEIVE', p_queue);
    END IF;
    RETURN (SELECT q.max_readers FROM sb.queue q WHERE q.name = p_queue);
END $$;

-- Views -------------------------------------------------------------------------------------

-- Each replaced only when its definition is not the one below, compared with a temporary
-- view of it (CREATE OR REPLACE VIEW locks the view against its readers).
DO $$
DECLARE
    v record;
BEGIN
    FOR v IN SELECT * FROM (VALUES
        ('sb.queue_depth', $q$
SELECT q.name AS queue, q.enabled, q.max_readers,
       count(m.id) AS messages,
       count(DISTINCT m.group_id) AS groups,
       min(m.enqueued_at) AS oldest_enqueued_at
  FROM sb.queue q LEFT JOIN sb.message m ON m.queue = q.name
 GROUP BY q.name, q.enabled, q.max_readers$q$),
        ('sb.endpoints_by_state', $q$
SELECT service, state, count(*) AS endpoints FROM sb.endpoint GROUP BY service, state$q$),
        ('sb.disabled_queues', $q$
SELECT name AS queue, poison_handling FROM sb.queue WHERE NOT enabled$q$)) AS w (name, query)
    LOOP
        EXECUTE 'CREATE TEMPORARY VIEW sb_wanted AS ' || v.query;
        IF pg_catalog.pg_get_viewdef(pg_catalog.to_regclass(v.name))
           IS DISTINCT FROM pg_catalog.pg_get_viewdef('pg_temp.sb_wanted'::regclass) THEN
            EXECUTE format('CREATE OR REPLACE VIEW %s AS %s', v.name, v.query);
        END IF;
        DROP VIEW pg_temp.sb_wanted;
    END LOOP;
END $$;

INSERT INTO sb.migration (version) VALUES (1) ON CONFLICT DO NOTHING;
-- 1001: max_readers honoured (above).
INSERT INTO sb.migration (version) VALUES (1001) ON CONFLICT DO NOTHING;

-- The benchmark's world on the PostgreSQL broker (`sbworker bench`): a queue
-- of in-order messages per conversation group and the business effect each message has.
-- Installed into a throwaway database of the bench's own cluster, never into yours.

SELECT sb.create_message_type('/Bench/Message', 'NONE');
SELECT sb.create_contract('/Bench/Contract', ARRAY[ARRAY['/Bench/Message', 'INITIATOR']]);
SELECT sb.create_queue('bench_source') WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'bench_source');
SELECT sb.create_queue('bench_target') WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'bench_target');
-- sbworker's attempt accounting is the poison rule (docs/retries.md).
SELECT sb.alter_queue(q, p_poison_handling => false) FROM unnest(ARRAY['bench_source', 'bench_target']) AS q;
SELECT sb.create_service('/Bench/Source', 'bench_source');
SELECT sb.create_service('/Bench/Target', 'bench_target', ARRAY['/Bench/Contract']);

CREATE SCHEMA IF NOT EXISTS bench;

-- The business row of a group: how many messages took effect, and the last one's
-- number (a message that does not follow it is counted as out of order).
CREATE TABLE IF NOT EXISTS bench.account (
    conversation uuid PRIMARY KEY,
    applied      bigint NOT NULL DEFAULT 0,
    last_seq     bigint NOT NULL DEFAULT 0,
    out_of_order bigint NOT NULL DEFAULT 0
);

-- One reply per message handled; planned_at is the open loop's planned send time of
-- the message (its body), so latency counts from the plan, not from the actual send.
CREATE TABLE IF NOT EXISTS bench.reply (
    conversation uuid NOT NULL,
    seq          bigint NOT NULL,
    handled_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    planned_at   timestamptz
);

-- Preloads `groups` dialogs of `per_group` messages each (with sending's full cost: the
-- broker's own sb.send), and their business rows.
CREATE OR REPLACE FUNCTION bench.preload(groups int, per_group int, body bytea)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    h uuid;
    far uuid;
BEGIN
    FOR g IN 1..groups LOOP
        h := sb.begin_dialog('/Bench/Source', '/Bench/Target', '/Bench/Contract');
        FOR i IN 1..per_group LOOP
            PERFORM sb.send(h, '/Bench/Message', body);
        END LOOP;
        SELECT far_handle INTO far FROM sb.endpoint WHERE handle = h;
        INSERT INTO bench.account (conversation) VALUES (far);
    END LOOP;
END $$;

-- A message's effect: its group's row moves on, a reply is written. An open-loop
-- message's body is its planned send time (seconds since the epoch, as text).
CREATE OR REPLACE FUNCTION bench.apply(p_conversation uuid, p_seq bigint, p_body bytea DEFAULT NULL)
RETURNS void LANGUAGE sql AS $$
    UPDATE bench.account
       SET applied = applied + 1,
           out_of_order = out_of_order + (last_seq <> p_seq - 1)::int,
           last_seq = p_seq
     WHERE conversation = p_conversation;
    INSERT INTO bench.reply (conversation, seq, planned_at)
    VALUES (p_conversation, p_seq,
            CASE WHEN p_body IS NOT NULL AND length(p_body) > 0 AND get_byte(p_body, 0) BETWEEN 48 AND 57
                 THEN to_timestamp(convert_from(p_body, 'UTF8')::float8) END);
$$;

-- The open loop's dialogs: `groups` of them; their handles. (The target side of a dialog
-- exists from its first message on, so the open loop keeps no business rows: its
-- replies are what it measures.)
CREATE OR REPLACE FUNCTION bench.open_dialogs(groups int)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    h uuid;
BEGIN
    FOR g IN 1..groups LOOP
        h := sb.begin_dialog('/Bench/Source', '/Bench/Target', '/Bench/Contract');
        RETURN NEXT h;
    END LOOP;
END $$;

-- graphile-worker's jobs for the same workload (its schema installed by its migration
-- first): one job per message, a named queue per group, each with the attempts sbworker
-- makes (3), in one add_jobs call. (add_job once per job was quadratic: its session plans
-- add_jobs' statements once, and the cached plan scans the growing jobs table on every
-- call; 216,000 jobs had not gone in after 12 minutes.) A queue is served by priority and
-- run_at, so run_at rises by a microsecond per message of a group, from an hour ago (all
-- runnable at once): the order within a group does not hang on the order of insertion.
CREATE OR REPLACE FUNCTION bench.preload_graphile(groups int, per_group int)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO bench.account (conversation)
    SELECT md5('group ' || g)::uuid FROM generate_series(1, groups) AS g;
    EXECUTE $q$
        SELECT count(*) FROM graphile_worker.add_jobs((
            SELECT array_agg(ROW('apply', json_build_object('c', md5('group ' || g)::uuid, 's', s), 'g' || g,
                                 $1 + s * interval '1 microsecond', 3, NULL, NULL, NULL)::graphile_worker.job_spec
                             ORDER BY s, g)
              FROM generate_series(1, $2) AS g, generate_series(1, $3) AS s))
    $q$ USING now() - interval '1 hour', groups, per_group;
END $$;

-- The poison workload's poison messages, on the peers' worlds (where a job's payload
-- carries the mark, and completed jobs may be deleted): which they were.
CREATE TABLE IF NOT EXISTS bench.poison (
    conversation uuid NOT NULL,
    seq          bigint NOT NULL,
    PRIMARY KEY (conversation, seq)
);

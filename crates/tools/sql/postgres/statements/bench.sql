-- The statements `sbworker bench` runs on PostgreSQL (its world: crates/tools/sql/postgres/bench.sql).

-- name: apply
SELECT bench.apply($1, $2, $3);

-- name: preload
SELECT bench.preload($1, $2, $3);

-- After the first part of a preload: fresh statistics (and plans) for the broker's tables.
-- name: analyze
ANALYZE sb.message, sb.group_ready, sb.endpoint, sb.conversation_group, bench.account;

-- name: replies
SELECT count(*) FROM bench.reply;

-- name: waiting
SELECT count(*) FROM sb.message WHERE queue = 'bench_target';

-- How the run ended: groups whose row did not see every message, messages applied out
-- of order, messages applied, replies, and distinct replies.
-- name: verify
SELECT (SELECT count(*) FROM bench.account WHERE applied <> $1),
       (SELECT coalesce(sum(out_of_order), 0)::bigint FROM bench.account),
       (SELECT coalesce(sum(applied), 0)::bigint FROM bench.account),
       (SELECT count(*) FROM bench.reply),
       (SELECT count(*) FROM (SELECT DISTINCT conversation, seq FROM bench.reply) d);

-- Commits and WAL written so far, for figures per message.
-- name: stats
SELECT (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()),
       (pg_current_wal_lsn() - '0/0'::pg_lsn)::bigint;

-- Latency of each reply from its message's enqueue time is not kept (the message row
-- is deleted on RECEIVE); the drain time is what the burn-down and headline measure.
-- name: reset
TRUNCATE bench.account, bench.reply, bench.poison, sb.message, sb.group_ready, sb.endpoint,
         sb.conversation_group, sbworker.message_attempt, sbworker.dead_letter;

-- name: limit_reset
TRUNCATE limit_q, limit_attempt, limit_account, limit_reply, calibration RESTART IDENTITY;

-- name: limit_preload
INSERT INTO limit_q (grp, seq)
SELECT g, s FROM generate_series(1, $1::int) g, generate_series(1, $2::int) s ORDER BY g, s;

-- name: limit_accounts
INSERT INTO limit_account (grp) SELECT generate_series(1, $1::int);

-- name: limit_verify
SELECT (SELECT count(*) FROM limit_q), (SELECT count(*) FROM limit_reply);

-- name: plimit_reset
TRUNCATE plimit_roster, plimit_request, plimit_answer, plimit_result, limit_attempt RESTART IDENTITY;

-- The pipeline limit's roster and the bodies its requests and answers carry.
-- name: plimit_setup
WITH bodies AS (
    INSERT INTO plimit_body (kind, body) VALUES ('vraag', $2::text), ('antwoord', $3::text)
    ON CONFLICT (kind) DO UPDATE SET body = excluded.body
)
INSERT INTO plimit_roster (dv) SELECT generate_series(1, $1::int);

-- How the pipeline limit's run ended: requests and answers left, keys whose stored
-- result is not their roster's latest version, edits made (the versions summed).
-- name: plimit_verify
SELECT (SELECT count(*) FROM plimit_request),
       (SELECT count(*) FROM plimit_answer),
       (SELECT count(*) FROM plimit_roster r LEFT JOIN plimit_result s USING (dv)
         WHERE r.versie > 0 AND s.versie IS DISTINCT FROM r.versie),
       (SELECT coalesce(sum(versie), 0)::bigint FROM plimit_roster);

-- The business limit (bench_business_limit.sql): the Vraags the roster's import logged,
-- one per key, for the engine.
-- name: blimit_vragen
SELECT dienstverband_id, periode_id, vraag FROM rekenserver.berekening_log WHERE uitkomst IS NULL ORDER BY 1, 2;

-- A key's answer, as the collector passes it to its store ($5 the values as text, $7
-- the warnings as JSON text), or the Fout it records ($8, $9).
-- name: blimit_antwoord
INSERT INTO bench_antwoord (dienstverband_id, periode_id, kaart_soorten, codes, waarden, rekenversie, waarschuwingen,
                            fout, herstelbaar)
VALUES ($1, $2, $3, $4, $5::text[]::numeric[], $6, $7::text::jsonb, $8, $9);

-- The import's answers stored by the collector's functions (or its Fouts recorded), so
-- that every edit replaces a stored result, as in the pipeline after its import.
-- name: blimit_store_import
SELECT count(CASE WHEN a.fout IS NULL
                  THEN rekenserver.sla_antwoord_op(l.dialog_handle, l.vraag_id, l.dienstverband_id, l.periode_id,
                                                    l.versie, false, a.kaart_soorten, a.codes, a.waarden,
                                                    a.rekenversie, a.waarschuwingen)
                  ELSE rekenserver.noteer_fout(l.dialog_handle, a.fout, a.herstelbaar, true)::text END)
  FROM rekenserver.berekening_log l JOIN bench_antwoord a USING (dienstverband_id, periode_id)
 WHERE l.uitkomst IS NULL;

-- Requests logged so far.
-- name: blimit_requests
SELECT count(*) FROM rekenserver.berekening_log;

-- How the business limit's run ended: requests without an outcome, keys whose stored
-- result is not their roster's latest version (the key the engine answers with a Fout
-- has none), requests logged.
-- name: blimit_verify
SELECT (SELECT count(*) FROM rekenserver.berekening_log WHERE uitkomst IS NULL),
       (SELECT count(*) FROM rekenserver.sleutel s
          LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
         WHERE r.versie IS DISTINCT FROM s.versie
           AND NOT EXISTS (SELECT 1 FROM bench_antwoord a
                            WHERE a.dienstverband_id = s.dienstverband_id AND a.periode_id = s.periode_id
                              AND a.fout IS NOT NULL)),
       (SELECT count(*) FROM rekenserver.berekening_log);

-- graphile-worker's world (after its own migration): the jobs, one per message, a named
-- queue per group, in order; and the business rows.
-- name: graphile_reset
TRUNCATE bench.account, bench.reply, bench.poison, graphile_worker._private_jobs,
         graphile_worker._private_job_queues CASCADE;

-- name: graphile_preload
SELECT bench.preload_graphile($1, $2);

-- River's world (after its own migration; its client preloads the jobs): the jobs and
-- the business rows.
-- name: river_reset
TRUNCATE bench.account, bench.reply, bench.poison, river_job RESTART IDENTITY;

-- name: pgmq_reset
TRUNCATE bench.account, bench.reply, bench.poison, pgmq.q_bench, pgmq.a_bench RESTART IDENTITY;

-- Where the pipeline's time goes (pg_stat_statements, when the server has it loaded).
-- name: pgss_available
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements')
   AND current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%';

-- name: pgss_install
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- A counting run's database: nested statements tracked too (sessions that start after
-- it). The timed runs keep the cluster's `top`: tracking a nested statement costs it
-- time, more for a contender that runs more of them.
-- name: pgss_track_all
DO $$ BEGIN EXECUTE format('ALTER DATABASE %I SET pg_stat_statements.track = %L', current_database(), 'all'); END $$;

-- name: pgss_reset
SELECT pg_stat_statements_reset();

-- Statements (nested ones too) by time, per request: calls, milliseconds and rows per
-- call (a RECEIVE's tell the empty ones from those that took messages).
-- name: pgss_top
SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 100),
       calls::float8 / $1::float8,
       mean_exec_time,
       total_exec_time / $1::float8,
       toplevel,
       rows::float8 / greatest(calls, 1)::float8
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time DESC
 LIMIT 14;

-- The work of a run per request ($1 requests), from the same counters: the statements
-- the clients sent (each a round trip), those run inside them (functions, triggers), and
-- the shared buffers the sent ones touched (nested statements' buffers are counted in
-- the statement that ran them). Counts, not times: they do not move with the machine's
-- speed, only with what the run did.
-- name: pgss_totals
SELECT coalesce(sum(calls) FILTER (WHERE toplevel), 0)::float8 / $1::float8,
       coalesce(sum(calls) FILTER (WHERE NOT toplevel), 0)::float8 / $1::float8,
       coalesce(sum(shared_blks_hit + shared_blks_read) FILTER (WHERE toplevel), 0)::float8 / $1::float8
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database());

-- The open loop: dialogs to send on, one send at its planned time, and the latency of
-- the messages planned after the warm-up, from the plan to the reply (ms).
-- name: open_dialogs
SELECT bench.open_dialogs($1);

-- name: send_planned
SELECT sb.send($1, '/Bench/Message', $2);

-- name: latency
SELECT count(*),
       coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY extract(epoch FROM handled_at - planned_at)::float8), 0) * 1000,
       coalesce(percentile_cont(0.95) WITHIN GROUP (ORDER BY extract(epoch FROM handled_at - planned_at)::float8), 0) * 1000,
       coalesce(percentile_cont(0.99) WITHIN GROUP (ORDER BY extract(epoch FROM handled_at - planned_at)::float8), 0) * 1000,
       coalesce(max(extract(epoch FROM handled_at - planned_at)::float8), 0) * 1000
  FROM bench.reply
 WHERE planned_at >= to_timestamp($1);

-- Workload 4, poison: after a preload, `$1` messages (chosen by hash: 1%) get the body
-- the bench's handler fails on.
-- name: poison_mark
UPDATE sb.message SET body = 'poison'::bytea
 WHERE id IN (SELECT id FROM sb.message WHERE queue = 'bench_target' ORDER BY md5(id::text) LIMIT $1::bigint);

-- Messages done: replied or dead-lettered.
-- name: poison_done
SELECT (SELECT count(*) FROM bench.reply) + (SELECT count(*) FROM sbworker.dead_letter);

-- How the poison run ended ($1 messages per group; $2 the run's start, epoch seconds).
-- A diverted conversation is one ordered stream: its first poison message and every
-- message after it are dead-lettered, the ones before it took effect. Columns: groups
-- without poison that are incomplete; messages out of order; groups diverted; diverted
-- groups that do not match (applied up to the poison, the rest dead-lettered, diverted
-- at a poison message); dead letters; replies; messages applied; distinct replies; the
-- queue still enabled; ms from a poison message reaching the head of its group (its
-- predecessor's reply, or the start) to its diversion: median and max.
-- name: poison_verify
WITH dl AS (
    SELECT conversation_handle AS c, min(message_sequence_number) AS first_seq, count(*) AS n,
           max(dead_lettered_at) AS at,
           (array_agg(message_body ORDER BY message_sequence_number))[1] = 'poison'::bytea AS at_poison
      FROM sbworker.dead_letter GROUP BY 1),
waits AS (
    SELECT extract(epoch FROM dl.at - coalesce(r.handled_at, to_timestamp($2::float8)))::float8 * 1000 AS ms
      FROM dl LEFT JOIN bench.reply r ON r.conversation = dl.c AND r.seq = dl.first_seq - 1)
SELECT (SELECT count(*) FROM bench.account a
         WHERE NOT EXISTS (SELECT 1 FROM dl WHERE dl.c = a.conversation) AND a.applied <> $1::bigint),
       (SELECT coalesce(sum(out_of_order), 0)::bigint FROM bench.account),
       (SELECT count(*) FROM dl),
       (SELECT count(*) FROM dl JOIN bench.account a ON a.conversation = dl.c
         WHERE a.applied <> dl.first_seq - 1 OR dl.n <> $1::bigint - dl.first_seq + 1 OR NOT dl.at_poison),
       (SELECT coalesce(sum(n), 0)::bigint FROM dl),
       (SELECT count(*) FROM bench.reply),
       (SELECT coalesce(sum(applied), 0)::bigint FROM bench.account),
       (SELECT count(*) FROM (SELECT DISTINCT conversation, seq FROM bench.reply) d),
       (SELECT enabled FROM sb.queue WHERE name = 'bench_target'),
       (SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0) FROM waits),
       (SELECT coalesce(max(ms), 0) FROM waits);

-- Workload 4, bloat: a transaction that pins xmin (a snapshot held open), and, at the
-- end, the dead tuples of the broker's and the bench's tables (largest first).
-- name: pin_xmin
BEGIN ISOLATION LEVEL REPEATABLE READ; SELECT count(*) FROM bench.account;

-- name: pinned
SELECT count(*) FROM pg_stat_activity WHERE backend_xmin IS NOT NULL AND pid = $1::int;

-- name: dead_tuples
SELECT schemaname || '.' || relname, n_dead_tup, n_live_tup
  FROM pg_stat_user_tables
 WHERE schemaname IN ('sb', 'bench', 'sbworker', 'graphile_worker', 'pgmq') OR relname LIKE 'river%'
 ORDER BY n_dead_tup DESC;

-- The peers in workloads 3 and 4. The poison messages: `$1` jobs (chosen by hash: 1%)
-- marked poison in their payload, and recorded in bench.poison.
-- name: graphile_poison_mark
WITH picked AS (SELECT id FROM graphile_worker._private_jobs ORDER BY md5(id::text) LIMIT $1::bigint),
marked AS (
    UPDATE graphile_worker._private_jobs j SET payload = (j.payload::jsonb || '{"p": true}')::json
      FROM picked WHERE j.id = picked.id
    RETURNING j.payload)
INSERT INTO bench.poison SELECT (payload->>'c')::uuid, (payload->>'s')::bigint FROM marked;

-- name: river_poison_mark
WITH picked AS (SELECT id FROM river_job ORDER BY md5(id::text) LIMIT $1::bigint),
marked AS (
    UPDATE river_job j SET args = j.args || '{"p": true}'::jsonb FROM picked WHERE j.id = picked.id
    RETURNING j.args)
INSERT INTO bench.poison SELECT (args->>'c')::uuid, (args->>'s')::bigint FROM marked;

-- A peer's dead letters, as the view peer_dead (group, number, when): graphile-worker's
-- jobs that failed their last attempt (it keeps them; it records no time of failure,
-- but sets run_at to the failure's now() + exp(attempts) seconds, the job having run
-- after its old run_at), River's discarded jobs.
-- name: graphile_dead
CREATE OR REPLACE TEMP VIEW peer_dead AS
SELECT (payload->>'c')::uuid AS c, (payload->>'s')::bigint AS s,
       run_at - exp(least(attempts, 10)) * interval '1 second' AS at
  FROM graphile_worker._private_jobs WHERE attempts >= max_attempts AND locked_at IS NULL;

-- name: pgmq_poison_mark
WITH picked AS (SELECT msg_id FROM pgmq.q_bench ORDER BY md5(msg_id::text) LIMIT $1::bigint),
marked AS (
    UPDATE pgmq.q_bench q SET message = q.message || '{"p": true}'::jsonb FROM picked WHERE q.msg_id = picked.msg_id
    RETURNING q.message)
INSERT INTO bench.poison SELECT (message->>'c')::uuid, (message->>'s')::bigint FROM marked;

-- name: pgmq_dead
CREATE OR REPLACE TEMP VIEW peer_dead AS
SELECT (message->>'c')::uuid AS c, (message->>'s')::bigint AS s, archived_at AS at FROM pgmq.a_bench;

-- name: river_dead
CREATE OR REPLACE TEMP VIEW peer_dead AS
SELECT (args->>'c')::uuid AS c, (args->>'s')::bigint AS s, finalized_at AS at
  FROM river_job WHERE state = 'discarded';

-- A peer's messages done: replied or dead (after its `*_dead`, on the same connection).
-- name: peer_poison_done
SELECT (SELECT count(*) FROM bench.reply) + (SELECT count(*) FROM peer_dead);

-- How a peer's poison run ended ($1 messages per group; $2 the run's start, epoch
-- seconds; after its `*_dead`). A peer goes on past a poison message to the rest of its
-- group: every other message of a poisoned group must take effect once and in order
-- (the bench's row counts one break of the sequence per run of poison messages that
-- does not end the group), and the dead letters must be the poison messages. Columns
-- as poison_verify's: groups without poison that are incomplete; their messages out of
-- order; groups with poison; poisoned groups or dead letters that do not match; dead
-- letters; replies; messages applied; distinct replies; NULL (no queue to disable); ms
-- from a poison message reaching the head of its group (its predecessor's reply, or the
-- start) to its last failure: median and max.
-- name: peer_poison_verify
WITH dead AS (SELECT c, s, at FROM peer_dead),
poisoned AS (
    SELECT p.conversation AS c, count(*) AS n,
           count(*) FILTER (WHERE p.seq < $1::bigint AND NOT EXISTS (
               SELECT 1 FROM bench.poison q WHERE q.conversation = p.conversation AND q.seq = p.seq + 1))
               AS breaks
      FROM bench.poison p GROUP BY 1),
waits AS (
    SELECT extract(epoch FROM d.at - coalesce(r.handled_at, to_timestamp($2::float8)))::float8 * 1000 AS ms
      FROM dead d LEFT JOIN bench.reply r ON r.conversation = d.c AND r.seq = d.s - 1)
SELECT (SELECT count(*) FROM bench.account a
         WHERE NOT EXISTS (SELECT 1 FROM poisoned p WHERE p.c = a.conversation) AND a.applied <> $1::bigint),
       (SELECT coalesce(sum(out_of_order), 0)::bigint FROM bench.account a
         WHERE NOT EXISTS (SELECT 1 FROM poisoned p WHERE p.c = a.conversation)),
       (SELECT count(*) FROM poisoned),
       (SELECT count(*) FROM poisoned p JOIN bench.account a ON a.conversation = p.c
         WHERE a.applied <> $1::bigint - p.n OR a.out_of_order <> p.breaks)
         + (SELECT count(*) FROM dead d FULL JOIN bench.poison p ON p.conversation = d.c AND p.seq = d.s
             WHERE d.c IS NULL OR p.conversation IS NULL),
       (SELECT count(*) FROM dead),
       (SELECT count(*) FROM bench.reply),
       (SELECT coalesce(sum(applied), 0)::bigint FROM bench.account),
       (SELECT count(*) FROM (SELECT DISTINCT conversation, seq FROM bench.reply) d),
       NULL::boolean,
       (SELECT coalesce(percentile_cont(0.5) WITHIN GROUP (ORDER BY ms), 0) FROM waits),
       (SELECT coalesce(max(ms), 0) FROM waits);

-- The open loop's groups on a peer's world: their conversations, as the peers' preloads
-- name them.
-- name: group_conversations
SELECT md5('group ' || g)::uuid FROM generate_series(1, $1::int) g ORDER BY g;

-- The open loop's send to graphile-worker: one job of the group's queue, carrying its
-- planned send time.
-- name: graphile_send
SELECT graphile_worker.add_job('apply', json_build_object('c', $1::uuid, 's', $2::bigint, 't', $3::text),
                               queue_name := $4::text, max_attempts := 3);

-- The server settings the report lists ($1 their names).
-- name: settings
SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY($1) ORDER BY name;

-- The session's backend (the poison run's xmin pin).
-- name: backend_pid
SELECT pg_backend_pid();

-- synchronous_commit for a run's new connections to a contender's database ({db} and
-- {value}: filled in, a statement takes no parameter there).
-- name: set_sync
ALTER DATABASE {db} SET synchronous_commit = {value};

-- The split part, after a repetition: the database's subscriptions dropped without their
-- slots (those are the other server's, dropped there), so that no apply worker, slot or
-- walsender of an earlier repetition runs beside the next.
-- name: split_drop_subscriptions
DO $$
DECLARE
    s record;
BEGIN
    FOR s IN SELECT subname FROM pg_catalog.pg_subscription
              WHERE subdbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database()) LOOP
        EXECUTE format('ALTER SUBSCRIPTION %I DISABLE', s.subname);
        EXECUTE format('ALTER SUBSCRIPTION %I SET (slot_name = NONE)', s.subname);
        EXECUTE format('DROP SUBSCRIPTION %I', s.subname);
    END LOOP;
END $$;

-- Then the database's slots no walsender holds any more (the far side's walsender ends
-- a moment after its subscription): called until none is left.
-- name: split_drop_slots
SELECT pg_catalog.pg_drop_replication_slot(slot_name)
  FROM pg_catalog.pg_replication_slots WHERE database = current_database() AND NOT active;

-- name: split_slots_left
SELECT count(*) FROM pg_catalog.pg_replication_slots WHERE database = current_database();

-- The web page at size (`bench --parts web`): $1 keys (one period each, dienstverband
-- 1..$1) of a CAO of their own, their results for every other key, two requests in the
-- calculation log per key (the second a Fout for one key in 100), and $2 dead letters,
-- one in 50 replayed. Written directly: the page reads these tables, not the roster.
-- name: web_world
WITH cao AS (
    INSERT INTO rooster.cao (id, code, is_vier_weken, naam, werkweek_uren)
    VALUES (900, 'BENCH', false, 'bench', 36) ON CONFLICT (id) DO NOTHING RETURNING id
), dv AS (
    INSERT INTO rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, soort, functiegroep)
    SELECT g, 900, 5, date '2020-01-01', 'FT', 40 FROM generate_series(1, $1::int) g, (SELECT 1 FROM cao UNION SELECT 1) c
    RETURNING id
), keys AS (
    INSERT INTO rekenserver.sleutel (dienstverband_id, periode_id, versie, group_id)
    SELECT id, 202601, 2, gen_random_uuid() FROM dv RETURNING dienstverband_id
), results AS (
    INSERT INTO rekenserver.resultaat (dienstverband_id, periode_id, versie, vraag_id, dialog_handle)
    SELECT dienstverband_id, 202601, 2, gen_random_uuid(), gen_random_uuid() FROM keys WHERE dienstverband_id % 2 = 0
    RETURNING 1
), log AS (
    INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, verzonden_op,
                                            beantwoord_op, uitkomst, foutmelding)
    SELECT gen_random_uuid(), gen_random_uuid(), k.dienstverband_id, 202601, v, now() - interval '2 hours',
           now() - interval '2 hours' + interval '40 ms',
           CASE WHEN v = 2 AND k.dienstverband_id % 100 = 1 THEN 'fout' ELSE 'opgeslagen' END,
           CASE WHEN v = 2 AND k.dienstverband_id % 100 = 1 THEN 'the calculation refused the roster' END
      FROM keys k, generate_series(1, 2) v
    RETURNING 1
)
INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
                                  conversation_handle, message_sequence_number, message_type_name, message_body,
                                  attempts, reason, replays)
SELECT 'loonfactorberekening_reken', '/Rekenserver/LoonfactorBerekening/RekenService',
       '/Rekenserver/LoonfactorBerekening/Contract', gen_random_uuid(), gen_random_uuid(), 1,
       '/Rekenserver/LoonfactorBerekening/Vraag', convert_to('<not-a-vraag/>', 'UTF8'), 3,
       CASE WHEN g % 10 = 0 THEN 'planted: deadlock victim' ELSE 'planted: the calculation failed' END,
       CASE WHEN g % 50 = 0 THEN 1 ELSE 0 END
  FROM generate_series(1, $2::int) g, (SELECT count(*) FROM results) r, (SELECT count(*) FROM log) l;

-- name: web_analyze
ANALYZE rooster.dienstverband, rekenserver.sleutel, rekenserver.resultaat, rekenserver.berekening_log,
        sbworker.dead_letter;

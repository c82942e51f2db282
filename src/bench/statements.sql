-- The statements `sbworker bench` runs on PostgreSQL (its world: broker/postgres/bench.sql).

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
SELECT count(*) FROM sb.message WHERE queue = 'bench_doel';

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
TRUNCATE bench.account, bench.reply, sb.message, sb.group_ready, sb.endpoint, sb.conversation_group,
         sbworker.message_attempt, sbworker.dead_letter;

-- name: limit_reset
TRUNCATE limit_q, limit_attempt, limit_account, limit_reply, calibration RESTART IDENTITY;

-- name: limit_preload
INSERT INTO limit_q (grp, seq)
SELECT g, s FROM generate_series(1, $1::int) g, generate_series(1, $2::int) s ORDER BY g, s;

-- name: limit_accounts
INSERT INTO limit_account (grp) SELECT generate_series(1, $1::int);

-- name: limit_verify
SELECT (SELECT count(*) FROM limit_q), (SELECT count(*) FROM limit_reply);

-- graphile-worker's world (after its own migration): the jobs, one per message, a named
-- queue per group, in order; and the business rows.
-- name: graphile_reset
TRUNCATE bench.account, bench.reply, graphile_worker._private_jobs, graphile_worker._private_job_queues CASCADE;

-- name: graphile_preload
SELECT bench.preload_graphile($1, $2);

-- River's world (after its own migration; its client preloads the jobs): the jobs and
-- the business rows.
-- name: river_reset
TRUNCATE bench.account, bench.reply, river_job RESTART IDENTITY;

-- Where the pipeline's time goes (pg_stat_statements, when the server has it loaded).
-- name: pgss_available
SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_stat_statements')
   AND current_setting('shared_preload_libraries') LIKE '%pg_stat_statements%';

-- name: pgss_install
CREATE EXTENSION IF NOT EXISTS pg_stat_statements;

-- name: pgss_reset
SELECT pg_stat_statements_reset();

-- Statements (nested ones too) by time, per request: calls and milliseconds.
-- name: pgss_top
SELECT left(regexp_replace(query, '\s+', ' ', 'g'), 100),
       calls::float8 / $1::float8,
       mean_exec_time,
       total_exec_time / $1::float8,
       toplevel
  FROM pg_stat_statements
 WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
 ORDER BY total_exec_time DESC
 LIMIT 14;

-- The open loop: dialogs to send on, one send at its planned time, and the latency of
-- the messages planned after the warm-up, from the plan to the reply (ms).
-- name: open_dialogs
SELECT bench.open_dialogs($1);

-- name: send_planned
SELECT sb.send($1, '/Bench/Bericht', $2);

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
 WHERE id IN (SELECT id FROM sb.message WHERE queue = 'bench_doel' ORDER BY md5(id::text) LIMIT $1::bigint);

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
       (SELECT enabled FROM sb.queue WHERE name = 'bench_doel'),
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
 WHERE schemaname IN ('sb', 'bench', 'sbworker')
 ORDER BY n_dead_tup DESC;

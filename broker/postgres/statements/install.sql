-- The statements of `sbworker install --postgres` (crates/core/src/broker/postgres/install.rs),
-- around the scripts of `broker/postgres/`. Parameters are $1, $2, ... as in the Rust
-- calls.

-- The install's transaction: its notices (IF NOT EXISTS, say) quiet, and no lock waited
-- for longer than 5 s. Behind a session idle in a transaction it would otherwise wait for
-- ever, and every planner and worker queued behind its locks with it; it gives up
-- (55P03) and is run again.
-- name: quiet_notices
SET LOCAL client_min_messages = warning;
SET LOCAL lock_timeout = '5s';

-- The side an install puts in (both, roster, calc: 001_broker.sql reads it), for this
-- transaction. $1 the side.
-- name: set_side
SELECT pg_catalog.set_config('sbworker.side', $1, true);

-- The install's version stamp: this sbworker's version and a hash of the part's
-- scripts, for `sbworker selftest`. $1 the part (broker, roster), $2 the stamp.
-- name: record_stamp
INSERT INTO sbworker.installation (part, stamp) VALUES ($1, $2)
    ON CONFLICT (part) DO UPDATE SET stamp = EXCLUDED.stamp, installed_at = clock_timestamp();

-- Workers first: the live calculation workers (a beat within three of their intervals)
-- that read an older Vraag contract than $1, or record none (a release before the
-- column), each described. Read through to_jsonb, so an install older than the columns
-- answers too. (The caller checks that the table exists.)
-- name: older_workers
-- (A worker of this release against the install before writes its contract version in
-- the version text, "0.1.0 contract 2": the column is not there yet. A worker that serves
-- no calculation queue reads no Vraag: only those with the queue, or with none reported
-- yet, count.)
SELECT format('%s pid %s (sbworker %s, contract %s)', w.host, w.pid, w.version,
              coalesce(to_jsonb(w) ->> 'contract_versie', 'before 2'))
  FROM sbworker.worker_instance w
 WHERE w.beat_at > clock_timestamp()
                   - make_interval(secs => greatest(3, 3 * coalesce((to_jsonb(w) ->> 'interval_ms')::int, 10000) / 1000.0))
   AND coalesce((to_jsonb(w) ->> 'contract_versie')::int,
                (regexp_match(w.version, 'contract ([0-9]+)'))[1]::int, 1) < $1
   AND (w.queues = '{}'::jsonb
        OR EXISTS (SELECT 1 FROM jsonb_object_keys(w.queues) k WHERE k ILIKE '%loonfactorberekening_reken'))
 ORDER BY w.host, w.pid;

-- name: heartbeat_table_exists
SELECT to_regclass('sbworker.worker_instance') IS NOT NULL;

-- `--worker-role LOGIN` and the like: one of sbworker's group roles to an existing
-- login. $1 the role, $2 the login.
-- name: grant_role
SELECT sb.grant_role($1, $2);

-- The side of sbworker the database holds (both, roster, calc), for the commands that
-- depend on it (crates/core/src/broker/postgres/install.rs, side_of); an install before
-- sides has no such function (42883: both).
-- name: install_side
SELECT rekenserver.install_side();

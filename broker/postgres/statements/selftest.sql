-- The statements of `sbworker selftest --postgres` (crates/core/src/selftest/postgres.rs), one per
-- "-- name:" section. Parameters are
-- $1, $2, ... as in the Rust calls. The scratch key of the round trip is dienstverband
-- $1 in a period of its own, $2 (December 2099, a month no real roster holds).

-- name: connection
SELECT current_setting('server_version'), current_user::text, current_database()::text,
       coalesce((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false),
       coalesce((SELECT version FROM pg_stat_ssl WHERE pid = pg_backend_pid()), '');

-- The broker's scripts applied (sb.migration) and the stamps written by the install.
-- name: installed
SELECT (SELECT coalesce(array_agg(version ORDER BY version), '{}') FROM sb.migration) AS versions,
       (SELECT stamp FROM sbworker.installation WHERE part = 'broker') AS broker,
       (SELECT stamp FROM sbworker.installation WHERE part = 'roster') AS roster,
       EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
                WHERE n.nspname = 'rooster' AND c.relname = 'dienst') AS has_roster;

-- Whether the schemas are there and usable. $1 schema names.
-- name: schema_privileges
SELECT s.name, n.oid IS NOT NULL, n.oid IS NOT NULL AND has_schema_privilege(n.oid, 'USAGE')
  FROM unnest($1::text[]) AS s(name)
  LEFT JOIN pg_namespace n ON n.nspname = s.name
 ORDER BY s.name;

-- Functions the worker calls ($1, schema-qualified names): whether one exists and
-- whether this login may execute it.
-- name: function_privileges
SELECT f.name,
       EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname || '.' || p.proname = f.name),
       EXISTS (SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname || '.' || p.proname = f.name AND has_function_privilege(p.oid, 'EXECUTE'))
  FROM unnest($1::text[]) AS f(name)
 ORDER BY f.name;

-- Tables the worker reads or writes ($1 names, $2 the privilege each needs).
-- name: table_privileges
SELECT t.name, t.privilege, to_regclass(t.name) IS NOT NULL,
       CASE WHEN to_regclass(t.name) IS NULL THEN false
            ELSE has_table_privilege(to_regclass(t.name), t.privilege) END
  FROM unnest($1::text[], $2::text[]) AS t(name, privilege)
 ORDER BY t.name, t.privilege;

-- The queues the worker serves ($1): whether each exists, is enabled, and has the
-- broker's poison-message detection off.
-- name: queues
SELECT w.name, q.enabled IS NOT NULL, coalesce(q.enabled, false), coalesce(q.poison_handling, false)
  FROM unnest($1::text[]) AS w(name)
  LEFT JOIN LATERAL sb.queue_state(w.name) q ON true
 ORDER BY w.name;

-- The round trip (functions of broker/postgres/005_housekeeping.sql, granted to the
-- worker's role), on the fixed scratch key (-1000001: crates/core/src/selftest/mod.rs). The scratch roster, in
-- one transaction: its commit trigger sends one Vraag.
-- name: scratch
SELECT rekenserver.selftest_scratch();

-- The scratch key's dialogs, newest version first: initiator, target, version, outcome.
-- name: scratch_dialogs
SELECT initiator, target, versie, uitkomst FROM rekenserver.selftest_dialogs();

-- The scratch key's stored result: version, factor rows, results the export would claim.
-- name: scratch_result
SELECT versie, factors, exportable FROM rekenserver.selftest_result();

-- The deep selftest (over SQL Server's emulator, `Rekenserver.selftest`'s 'wijzig' and
-- 'verlies'): a planner's edit of the scratch roster, and a DBA ending the newest
-- request's dialog on the calculation side with cleanup.
-- name: scratch_change
SELECT rekenserver.selftest_change();

-- name: scratch_lose
SELECT rekenserver.selftest_lose();

-- name: live_workers
SELECT rekenserver.selftest_workers();

-- Cleaning up: the roster (sending switched off), then, in a transaction of its own
-- after that one's commit, the bookkeeping.
-- name: cleanup_roster
SELECT rekenserver.selftest_cleanup_roster();

-- name: cleanup_books
SELECT rekenserver.selftest_cleanup_books();

-- The Service Broker rights of this login ($1 rights, $2 the queue or service of each):
-- whether it holds each (sb.may: granted to one of its roles, or the installer).
-- name: broker_rights
SELECT r.right_name, r.object_name, sb.may(r.right_name, r.object_name)
  FROM unnest($1::text[], $2::text[]) AS r(right_name, object_name);

-- A side's routes: those out (to the far service: subscribed by the far database, read
-- now), and how many subscriptions bring messages in and are applying now.
-- name: routes
SELECT coalesce(array_agg(format('%s to %s%s', r.route, r.service,
                                 CASE WHEN NOT r.subscribed THEN ' (not subscribed)'
                                      WHEN NOT r.reading THEN ' (not read)' ELSE '' END) ORDER BY r.route),
                '{}'::text[]),
       count(*) FILTER (WHERE r.subscribed AND r.reading)::int,
       count(*)::int,
       (SELECT count(*)::int FROM pg_catalog.pg_stat_subscription s
         WHERE s.subname LIKE 'sb\_route\_%' AND s.relid IS NULL AND s.pid IS NOT NULL)
  FROM sb.route_state r;

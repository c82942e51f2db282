-- The statements of `sbworker selftest --postgres` (src/selftest/postgres.rs), one per
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
       to_regclass('rooster.dienst') IS NOT NULL AS has_roster;

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
SELECT w.name, q.name IS NOT NULL, coalesce(q.enabled, false), coalesce(q.poison_handling, false)
  FROM unnest($1::text[]) AS w(name)
  LEFT JOIN sb.queue q ON q.name = w.name
 ORDER BY w.name;

-- The round trip's scratch roster, in one transaction: a CAO, a period, a dienstverband
-- and one duty with one block, so the commit trigger sends one Vraag. $1 the scratch
-- dienstverband and CAO id, $2 the scratch period.
-- name: scratch_cao
INSERT INTO rooster.cao (id, code, is_vier_weken, naam, werkweek_uren)
VALUES ($1, 'ZKH', false, 'sbworker selftest', 36);

-- name: scratch_periode
INSERT INTO rooster.periode (id, is_vier_weken, begin_datum, eind_datum)
VALUES ($1, false, DATE '2099-12-01', DATE '2099-12-31');

-- name: scratch_dienstverband
INSERT INTO rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris, soort,
                                   functiegroep)
VALUES ($1, $1, 5, DATE '2099-01-01', 36, 3000, 'FT', 45);

-- name: scratch_dienst_type
INSERT INTO rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren)
VALUES ('STEST', 'sbworker selftest', true)
    ON CONFLICT (code) DO NOTHING;

-- name: scratch_dienst
WITH d AS (INSERT INTO rooster.dienst (dienstverband_id, datum) VALUES ($1, DATE '2099-12-07') RETURNING id)
INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
SELECT id, TIME '07:00', TIME '15:30', 'STEST' FROM d;

-- The scratch key's dialogs, newest version first: the initiator's handle, the
-- target's (the same conversation's other endpoint), the version, the outcome.
-- name: scratch_dialogs
SELECT l.dialog_handle, t.handle, l.versie, l.uitkomst
  FROM rekenserver.berekening_log l
  LEFT JOIN sb.endpoint i ON i.handle = l.dialog_handle
  LEFT JOIN sb.endpoint t ON t.conversation_id = i.conversation_id AND t.handle <> i.handle
 WHERE l.dienstverband_id = $1 AND l.periode_id = $2
 ORDER BY l.versie DESC;

-- The scratch key's stored result: its version and number of factor rows.
-- name: scratch_result
SELECT r.versie, (SELECT count(*) FROM rekenserver.resultaat_factor f
                   WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id)
  FROM rekenserver.resultaat r
 WHERE r.dienstverband_id = $1 AND r.periode_id = $2;

-- The scratch key's roster version.
-- name: scratch_version
SELECT versie FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = $2;

-- Cleaning up, in one transaction with sending switched off: conversations of the
-- scratch key that are still open, then every row the round trip wrote. $1 the
-- scratch dienstverband (the period's statement: $1 the period).
-- name: cleanup_off
SET LOCAL rekenserver.vragen_uit = on;

-- name: cleanup_conversations
SELECT sb.end_conversation_cleanup(e.handle)
  FROM rekenserver.berekening_log l
  JOIN sb.endpoint i ON i.handle = l.dialog_handle
  JOIN sb.endpoint e ON e.conversation_id = i.conversation_id
 WHERE l.dienstverband_id = $1;

-- name: cleanup_roster
DELETE FROM rooster.dienst WHERE dienstverband_id = $1;

-- name: cleanup_dienstverband
DELETE FROM rooster.dienstverband WHERE id = $1;

-- name: cleanup_periode
DELETE FROM rooster.periode WHERE id = $1;

-- name: cleanup_cao
DELETE FROM rooster.cao WHERE id = $1;

-- name: cleanup_dienst_type
DELETE FROM rooster.dienst_type d
 WHERE d.code = 'STEST' AND NOT EXISTS (SELECT 1 FROM rooster.tijdblok t WHERE t.dienst_type = d.code);

-- name: cleanup_factors
DELETE FROM rekenserver.resultaat_factor WHERE dienstverband_id = $1;

-- name: cleanup_results
DELETE FROM rekenserver.resultaat WHERE dienstverband_id = $1;

-- name: cleanup_history
DELETE FROM rekenserver.resultaat_historie WHERE dienstverband_id = $1;

-- name: cleanup_log
DELETE FROM rekenserver.berekening_log WHERE dienstverband_id = $1;

-- name: cleanup_keys
DELETE FROM rekenserver.sleutel WHERE dienstverband_id = $1;

-- name: cleanup_answered
DELETE FROM sbworker.answered_version WHERE dienstverband_id = $1;

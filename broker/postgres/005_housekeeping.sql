-- sbworker PostgreSQL broker, version 5: housekeeping (installed with the roster).
--
-- Idempotent. The run log of `sbworker sweep` (the original sweep's run table): one row
-- per run and one per step, with start, end, milliseconds, candidates, messages sent,
-- rows deleted and the error or warning text (empty means clean).

CREATE TABLE IF NOT EXISTS rekenserver.run_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    run_id      bigint,                 -- the run's own row; NULL on the run row itself
    stap        text NOT NULL,          -- run, sweep, retentie
    start       timestamptz NOT NULL DEFAULT clock_timestamp(),
    eind        timestamptz,
    ms          int,
    kandidaten  int,
    verzonden   int,
    verwijderd  int,
    fout        text
);
-- (Indexes and columns only when missing: see 001_broker.sql.)
DO $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.run_log_start') IS NULL THEN
        CREATE INDEX IF NOT EXISTS run_log_start ON rekenserver.run_log (start);
    END IF;
END $$;

-- (The failure's class was read from its text once; it is a column of the log now,
-- berekening_log.herstelbaar, written by whoever records the failure.)
DROP FUNCTION IF EXISTS rekenserver.fout_te_herstellen(text) CASCADE;

-- Keys whose roster version is newer than their stored result, with no calculation in
-- flight, oldest change first. In flight means a log row without an outcome; a lost
-- dialog's row gets one from rekenserver.markeer_verloren (the sweep runs it first), and
-- every dialog has a LIFETIME, so no key stays "in flight" for good. A key whose latest
-- version ended in a Fout about the request is left out (it would only fail again: it
-- waits for a roster change), and so is one whose Vraag cannot be built at its version
-- (rekenserver.onverzendbaar); one whose latest version failed by the environment
-- (herstel: a repair) is sent again, at most three times for the same version, so a
-- request that keeps killing the worker is not sent forever.
-- (Replaced only when its definition is not this one, compared with a temporary view of
-- it: CREATE OR REPLACE VIEW locks the view against the sweep.)
DO $$
DECLARE
    v_query text := $q$
SELECT s.dienstverband_id, s.periode_id, s.versie, s.gewijzigd_op,
       EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                  AND l.versie = s.versie AND l.uitkomst = 'fout') AS herstel
  FROM rekenserver.sleutel s
  LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
 WHERE s.versie > coalesce(r.versie, 0)
   AND NOT EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                    WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                      AND (l.uitkomst IS NULL
                           OR (l.versie = s.versie AND l.uitkomst = 'fout' AND NOT coalesce(l.herstelbaar, false))))
   AND NOT EXISTS (SELECT 1 FROM rekenserver.onverzendbaar o
                    WHERE o.dienstverband_id = s.dienstverband_id AND o.periode_id = s.periode_id
                      AND o.versie = s.versie)
   AND (SELECT count(*) FROM rekenserver.berekening_log l
         WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
           AND l.versie = s.versie AND l.uitkomst = 'fout') < 3$q$;
BEGIN
    EXECUTE 'CREATE TEMPORARY VIEW verouderde_sleutel_wanted AS ' || v_query;
    IF pg_catalog.pg_get_viewdef(pg_catalog.to_regclass('rekenserver.verouderde_sleutel'))
       IS DISTINCT FROM pg_catalog.pg_get_viewdef('pg_temp.verouderde_sleutel_wanted'::regclass) THEN
        EXECUTE 'CREATE OR REPLACE VIEW rekenserver.verouderde_sleutel AS ' || v_query;
    END IF;
    DROP VIEW pg_temp.verouderde_sleutel_wanted;
END $$;

-- `sbworker selftest`'s round trip, as the worker's login (006_security.sql grants these
-- to sbworker_worker; they run with their owner's rights): a scratch key's roster
-- written (the commit trigger sends its Vraag), what came of it read, and everything
-- removed again. The scratch key is fixed (dienstverband, CAO and period -1000001,
-- crates/core/src/selftest/mod.rs): taking no ids, these cannot touch any other key's rows.
DROP FUNCTION IF EXISTS rekenserver.selftest_scratch(int, int);
DROP FUNCTION IF EXISTS rekenserver.selftest_dialogs(int, int);
DROP FUNCTION IF EXISTS rekenserver.selftest_result(int, int);
DROP FUNCTION IF EXISTS rekenserver.selftest_cleanup_roster(int, int);
DROP FUNCTION IF EXISTS rekenserver.selftest_cleanup_books(int);
CREATE OR REPLACE FUNCTION rekenserver.selftest_scratch() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rooster.cao (id, code, is_vier_weken, naam, werkweek_uren)
    VALUES (-1000001, 'ZKH', false, 'sbworker selftest', 36);
    INSERT INTO rooster.periode (id, is_vier_weken, begin_datum, eind_datum)
    VALUES (-1000001, false, DATE '2099-12-01', DATE '2099-12-31');
    INSERT INTO rooster.dienstverband (id, cao_id, dagen_per_week, datum_in_dienst, parttime_uren, salaris, soort,
                                       functiegroep)
    VALUES (-1000001, -1000001, 5, DATE '2099-01-01', 36, 3000, 'FT', 45);
    INSERT INTO rooster.dienst_type (code, omschrijving, telt_mee_in_gewerkte_uren)
    VALUES ('STEST', 'sbworker selftest', true)
        ON CONFLICT (code) DO NOTHING;
    WITH d AS (INSERT INTO rooster.dienst (dienstverband_id, datum) VALUES (-1000001, DATE '2099-12-07') RETURNING id)
    INSERT INTO rooster.tijdblok (dienst_id, begin_tijd, eind_tijd, dienst_type)
    SELECT id, TIME '07:00', TIME '15:30', 'STEST' FROM d;
END $$;

-- The scratch key's dialogs, newest version first: the initiator's handle, the
-- target's (the same conversation's other endpoint), the version, the outcome.
CREATE OR REPLACE FUNCTION rekenserver.selftest_dialogs()
RETURNS TABLE (initiator uuid, target uuid, versie bigint, uitkomst text)
LANGUAGE sql STABLE AS $$
    SELECT l.dialog_handle, t.handle, l.versie, l.uitkomst
      FROM rekenserver.berekening_log l
      LEFT JOIN sb.endpoint i ON i.handle = l.dialog_handle
      LEFT JOIN sb.endpoint t ON t.conversation_id = i.conversation_id AND t.handle <> i.handle
     WHERE l.dienstverband_id = -1000001 AND l.periode_id = -1000001
     ORDER BY l.versie DESC, l.verzonden_op DESC
$$;

-- The scratch key's stored result: its version, its number of factor rows, and how
-- many results of its period payroll's export would claim (one: the scratch key's).
CREATE OR REPLACE FUNCTION rekenserver.selftest_result()
RETURNS TABLE (versie bigint, factors bigint, exportable bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.versie,
           (SELECT count(*) FROM rekenserver.resultaat_factor f
             WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id),
           (SELECT count(*) FROM rekenserver.resultaat e
             WHERE e.periode_id = -1000001 AND e.export_status = 0
               AND EXISTS (SELECT 1 FROM rekenserver.resultaat_factor f
                            WHERE f.dienstverband_id = e.dienstverband_id AND f.periode_id = e.periode_id))
      FROM rekenserver.resultaat r
     WHERE r.dienstverband_id = -1000001 AND r.periode_id = -1000001
$$;

-- The deep selftest's planner: the scratch block half an hour longer (its commit
-- trigger sends the key's next Vraag).
CREATE OR REPLACE FUNCTION rekenserver.selftest_change() RETURNS void
LANGUAGE sql AS $$
    UPDATE rooster.tijdblok t SET eind_tijd = t.eind_tijd + interval '30 minutes'
      FROM rooster.dienst d
     WHERE d.id = t.dienst_id AND d.dienstverband_id = -1000001
$$;

-- The deep selftest's DBA: the scratch key's newest request ended on the calculation
-- side with cleanup (the initiator is not told), so the next sweep must find it lost.
-- The target's handle, NULL when there was none to end.
CREATE OR REPLACE FUNCTION rekenserver.selftest_lose() RETURNS uuid
LANGUAGE plpgsql AS $$
DECLARE
    v_target uuid;
BEGIN
    SELECT t.handle INTO v_target
      FROM rekenserver.berekening_log l
      JOIN sb.endpoint i ON i.handle = l.dialog_handle
      JOIN sb.endpoint t ON t.conversation_id = i.conversation_id AND t.handle <> i.handle
     WHERE l.dienstverband_id = -1000001 AND l.periode_id = -1000001
     ORDER BY l.versie DESC, l.verzonden_op DESC LIMIT 1;
    IF v_target IS NOT NULL THEN
        PERFORM sb.end_conversation_cleanup(v_target);
    END IF;
    RETURN v_target;
END $$;

-- The deep selftest wants the queues to itself: how many workers beat within three of
-- their intervals (at least 3 s), as `sbworker status` counts them alive.
CREATE OR REPLACE FUNCTION rekenserver.selftest_workers() RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FROM sbworker.worker_instance
             WHERE beat_at > clock_timestamp() - make_interval(secs => (CASE WHEN interval_ms < 1000 THEN 3000 ELSE 3 * interval_ms END) / 1000.0));
END $$;

-- Cleaning up, step 1 (sending switched off for the rest of the transaction): the
-- scratch key's open conversations and its roster. Its commit raises the key's version.
CREATE OR REPLACE FUNCTION rekenserver.selftest_cleanup_roster() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('rekenserver.vragen_uit', 'on', true);
    -- A dialog whose far side is in another database (a split install) ends normally, so
    -- that the far side hears of it; the rest (both endpoints here) with cleanup.
    PERFORM CASE WHEN e.routed THEN sb.end_conversation(e.handle) ELSE sb.end_conversation_cleanup(e.handle) END
       FROM (SELECT DISTINCT e.handle, e.route IS NOT NULL AND e.state NOT IN ('DO', 'CD') AS routed
               FROM rekenserver.berekening_log l
               JOIN sb.endpoint i ON i.handle = l.dialog_handle
               JOIN sb.endpoint e ON e.conversation_id = i.conversation_id
              WHERE l.dienstverband_id = -1000001) e;
    DELETE FROM rooster.dienst WHERE dienstverband_id = -1000001;
    DELETE FROM rooster.dienstverband WHERE id = -1000001;
    DELETE FROM rooster.periode WHERE id = -1000001;
    DELETE FROM rooster.cao WHERE id = -1000001;
    DELETE FROM rooster.dienst_type d
     WHERE d.code = 'STEST' AND NOT EXISTS (SELECT 1 FROM rooster.tijdblok t WHERE t.dienst_type = d.code);
END $$;

-- Step 2, in a transaction after step 1's: the key's bookkeeping.
CREATE OR REPLACE FUNCTION rekenserver.selftest_cleanup_books() RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM rekenserver.resultaat_factor WHERE dienstverband_id = -1000001;
    DELETE FROM rekenserver.resultaat WHERE dienstverband_id = -1000001;
    DELETE FROM rekenserver.resultaat_historie WHERE dienstverband_id = -1000001;
    DELETE FROM rekenserver.berekening_log WHERE dienstverband_id = -1000001;
    DELETE FROM rekenserver.sleutel WHERE dienstverband_id = -1000001;
    DELETE FROM sbworker.answered_version WHERE dienstverband_id = -1000001;
END $$;

-- The newest runs of the run log (a sweep's run row, a recompute's row; their steps
-- left out), at most p_limit, for the web page's runs. A recompute still running has no
-- end yet, and its counts are its progress (written after every batch).
CREATE OR REPLACE FUNCTION rekenserver.runs(p_limit int)
RETURNS TABLE (id bigint, stap text, start timestamptz, eind timestamptz, ms int, kandidaten int, verzonden int,
               verwijderd int, fout text)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT r.id, r.stap, r.start, r.eind, r.ms, r.kandidaten, r.verzonden, r.verwijderd, r.fout
      FROM rekenserver.run_log r
     WHERE r.run_id IS NULL
     ORDER BY r.id DESC
     LIMIT p_limit
$$;

-- The newest export batches the stored results were last claimed in (sbworker export),
-- at most p_limit: the period, when claimed, how many results, how many confirmed.
CREATE OR REPLACE FUNCTION rekenserver.export_batches(p_limit int)
RETURNS TABLE (export_batch uuid, periode_id int, claimed_at timestamptz, results bigint, confirmed bigint)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT r.export_batch, min(r.periode_id), max(r.geclaimd_op), count(*), count(*) FILTER (WHERE r.export_status = 2)
      FROM rekenserver.resultaat r
     WHERE r.export_batch IS NOT NULL
     GROUP BY r.export_batch
     ORDER BY max(r.geclaimd_op) DESC
     LIMIT p_limit
$$;

INSERT INTO sb.migration (version) VALUES (5) ON CONFLICT DO NOTHING;

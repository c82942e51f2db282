-- Roles and rights, as strict as Service Broker's on SQL Server (broker/mssql/07_security.sql).
-- Four group roles (NOLOGIN; `sbworker install --worker-role LOGIN …` grants them to
-- logins):
--   sbworker_worker        receives from the calculation's queues, sends on its
--                          services, ends conversations, keeps its bookkeeping (attempts,
--                          dead letters, the version claim) and stores results; nothing
--                          else: no roster, no DDL.
--   sbworker_sender        the roster triggers' side: holds Service Broker's SEND on the
--                          calculation service, and sends only through the triggers
--                          (they run with their owner's rights and build the Vraag from
--                          the roster): it may call no broker function itself, so it
--                          cannot send a Vraag of its own making; with the roster
--                          installed, edits it.
--   sbworker_payroll       exports results and acknowledges them.
--   sbworker_housekeeping  the sweep (sending stale keys again) and retention; the
--                          dead letters (`sbworker dead-letter`) and the status.
--   sbworker_monitor       reads the status (`sbworker status`) and nothing else: for
--                          monitoring systems.
-- PUBLIC gets nothing on the broker's schemas. The functions a role calls run with their
-- owner's rights (SECURITY DEFINER) and a pinned search_path, so no table of the broker
-- is reachable but through them, and a caller's search_path changes nothing they run.
-- Runs after the other scripts on every install (idempotent); the roster's part only
-- where the roster is installed.

DO $$
DECLARE
    r text;
BEGIN
    FOREACH r IN ARRAY ARRAY['sbworker_worker', 'sbworker_sender', 'sbworker_payroll', 'sbworker_housekeeping',
                             'sbworker_monitor'] LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = r) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN', r);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN
                NULL; -- another install in the same cluster made it just now
            END;
        END IF;
    END LOOP;
END $$;

-- Nothing for PUBLIC.
REVOKE ALL ON SCHEMA sb, sbworker, rekenserver FROM PUBLIC;
REVOKE ALL ON ALL TABLES IN SCHEMA sb, sbworker, rekenserver FROM PUBLIC;
REVOKE ALL ON ALL SEQUENCES IN SCHEMA sb, sbworker, rekenserver FROM PUBLIC;
REVOKE ALL ON ALL FUNCTIONS IN SCHEMA sb, sbworker, rekenserver FROM PUBLIC;
-- (A function made later in these schemas is executable by PUBLIC until the next
-- install revokes it: PostgreSQL's per-schema default privileges cannot take PUBLIC's
-- EXECUTE away.)

-- The functions each role calls (by schema and name, every overload).
CREATE TEMPORARY TABLE sbworker_callable (role text, schema_name text, function_name text) ON COMMIT DROP;
INSERT INTO sbworker_callable VALUES
    ('sbworker_worker', 'sb', 'channel'),
    ('sbworker_worker', 'sb', 'begin_wait'),
    ('sbworker_worker', 'sb', 'end_wait'),
    ('sbworker_worker', 'sb', 'receive'),
    ('sbworker_worker', 'sb', 'receive_marking'),
    ('sbworker_worker', 'sb', 'get_conversation_group'),
    ('sbworker_worker', 'sb', 'send'),
    ('sbworker_worker', 'sb', 'end_conversation'),
    ('sbworker_worker', 'sb', 'end_conversation_cleanup'),
    ('sbworker_worker', 'sb', 'move_conversation'),
    ('sbworker_worker', 'sb', 'begin_conversation_timer'),
    ('sbworker_worker', 'sb', 'note_rollback'),
    ('sbworker_worker', 'sb', 'queue_state'),
    ('sbworker_worker', 'sb', 'queue_max_readers'),
    ('sbworker_worker', 'sb', 'may'),
    ('sbworker_worker', 'rekenserver', 'sla_antwoord_op'),
    ('sbworker_worker', 'rekenserver', 'noteer_fout'),
    ('sbworker_worker', 'rekenserver', 'dialoog_stil'),
    ('sbworker_worker', 'rekenserver', 'selftest_scratch'),
    ('sbworker_worker', 'rekenserver', 'selftest_dialogs'),
    ('sbworker_worker', 'rekenserver', 'selftest_result'),
    ('sbworker_worker', 'rekenserver', 'selftest_cleanup_roster'),
    ('sbworker_worker', 'rekenserver', 'selftest_cleanup_books'),
    ('sbworker_worker', 'rekenserver', 'selftest_change'),
    ('sbworker_worker', 'rekenserver', 'selftest_lose'),
    ('sbworker_worker', 'rekenserver', 'selftest_workers'),
    ('sbworker_housekeeping', 'rekenserver', 'stuur_vraag'),
    ('sbworker_housekeeping', 'rekenserver', 'markeer_verloren'),
    ('sbworker_housekeeping', 'rekenserver', 'verlopen_dialogen'),
    ('sbworker_housekeeping', 'rekenserver', 'markeer_sleutels'),
    ('sbworker_housekeeping', 'rekenserver', 'herbereken_sleutels'),
    ('sbworker_housekeeping', 'rekenserver', 'herbereken'),
    ('sbworker_housekeeping', 'rekenserver', 'bewijs'),
    ('sbworker_payroll', 'rekenserver', 'bewijs'),
    ('sbworker_housekeeping', 'rekenserver', 'runs'),
    ('sbworker_housekeeping', 'rekenserver', 'export_batches'),
    ('sbworker_payroll', 'rekenserver', 'export_batches'),
    ('sbworker_housekeeping', 'rekenserver', 'sleutels_zoek'),
    ('sbworker_payroll', 'rekenserver', 'sleutels_zoek'),
    ('sbworker_housekeeping', 'rekenserver', 'sleutel_tijdlijn'),
    ('sbworker_payroll', 'rekenserver', 'sleutel_tijdlijn'),
    ('sbworker_payroll', 'rekenserver', 'export_claim'),
    ('sbworker_payroll', 'rekenserver', 'install_side'),
    ('sbworker_housekeeping', 'rekenserver', 'install_side'),
    ('sbworker_worker', 'rekenserver', 'install_side'),
    ('sbworker_worker', 'sbworker', 'heartbeat'),
    ('sbworker_worker', 'sbworker', 'heartbeat_end'),
    ('sbworker_housekeeping', 'sbworker', 'dead_letters'),
    ('sbworker_housekeeping', 'sbworker', 'dead_letter'),
    ('sbworker_housekeeping', 'sbworker', 'replay_dead_letter'),
    ('sbworker_housekeeping', 'sbworker', 'note_replayed'),
    ('sbworker_housekeeping', 'sbworker', 'purge_dead_letters'),
    ('sbworker_housekeeping', 'sbworker', 'dead_letter_page'),
    ('sbworker_housekeeping', 'sbworker', 'dead_letter_count'),
    ('sbworker_housekeeping', 'sbworker', 'purge_dead_letters_matching'),
    ('sbworker_housekeeping', 'sbworker', 'note_action'),
    ('sbworker_housekeeping', 'sbworker', 'actions'),
    ('sbworker_housekeeping', 'sbworker', 'rates'),
    ('sbworker_monitor', 'sbworker', 'rates'),
    ('sbworker_housekeeping', 'sbworker', 'status_report'),
    ('sbworker_monitor', 'sbworker', 'status_report');

DO $$
DECLARE
    f record;
BEGIN
    -- Every function of these schemas runs with the same pinned search_path, not only
    -- those a role calls: a function called under one search_path and then another has
    -- its cached plans made again each time (measured: a begin_dialog and a send cost
    -- 1.3 ms with only the entry points pinned, 0.57 ms with all of them).
    FOR f IN
        SELECT p.oid::regprocedure AS proc
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE n.nspname IN ('sb', 'sbworker', 'rekenserver', 'rooster') AND p.prokind = 'f'
    LOOP
        EXECUTE format('ALTER FUNCTION %s SET search_path = pg_catalog, pg_temp', f.proc);
    END LOOP;
    -- Every function a role calls, and the roster's trigger functions: the owner's
    -- rights, a pinned search_path.
    FOR f IN
        SELECT DISTINCT p.oid::regprocedure AS proc
          FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
         WHERE (n.nspname, p.proname) IN (SELECT schema_name, function_name FROM sbworker_callable)
            OR (n.nspname = 'rekenserver' AND p.proname IN ('verstuur_vraag', 'bij_commit'))
            OR (n.nspname = 'sbworker' AND p.proname = 'dead_letter_far_service')
            OR (n.nspname = 'rooster' AND p.proname LIKE 'noteer\_%')
    LOOP
        EXECUTE format('ALTER FUNCTION %s SECURITY DEFINER SET search_path = pg_catalog, pg_temp', f.proc);
    END LOOP;
    FOR f IN
        SELECT c.role, p.oid::regprocedure AS proc
          FROM sbworker_callable c
          JOIN pg_catalog.pg_namespace n ON n.nspname = c.schema_name
          JOIN pg_catalog.pg_proc p ON p.pronamespace = n.oid AND p.proname = c.function_name
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.proc, f.role);
    END LOOP;
END $$;

GRANT USAGE ON SCHEMA sb TO sbworker_worker;
-- The routes of a split install, for the selftest (008_routes.sql).
GRANT SELECT ON sb.route_state TO sbworker_worker;
GRANT USAGE ON SCHEMA sbworker TO sbworker_worker, sbworker_housekeeping, sbworker_monitor;
GRANT USAGE ON SCHEMA rekenserver TO sbworker_worker, sbworker_payroll, sbworker_housekeeping;

-- The worker's bookkeeping: attempts, dead letters, the version claim.
GRANT SELECT, INSERT, UPDATE, DELETE ON sbworker.message_attempt TO sbworker_worker;
GRANT INSERT ON sbworker.dead_letter TO sbworker_worker;
GRANT SELECT, INSERT, UPDATE ON sbworker.answered_version TO sbworker_worker;
-- What was installed (the selftest compares it with itself).
GRANT SELECT ON sb.migration, sbworker.installation TO sbworker_worker;

-- Payroll: the results and the export's columns of them.
GRANT SELECT ON rekenserver.resultaat, rekenserver.resultaat_factor TO sbworker_payroll;
GRANT UPDATE (export_status, export_batch, geclaimd_op, geexporteerd_op, geexporteerde_versie)
    ON rekenserver.resultaat TO sbworker_payroll;
-- ... and when each version went out, in its evidence.
GRANT SELECT (dienstverband_id, periode_id, versie, geexporteerd_op), UPDATE (geexporteerd_op)
    ON rekenserver.resultaat_historie TO sbworker_payroll;

-- Housekeeping: retention of the dead letters.
GRANT SELECT, DELETE ON sbworker.dead_letter TO sbworker_housekeeping;
-- The sweep's retention of stored results' evidence.
GRANT SELECT, DELETE ON rekenserver.resultaat_historie TO sbworker_housekeeping;

-- Service Broker's rights on the calculation's services and queues (003_calculation.sql).
SELECT sb.grant_receive(q, 'sbworker_worker')
  FROM unnest(ARRAY['loonfactorberekening_reken', 'loonfactorberekening_data']) AS q
 WHERE EXISTS (SELECT 1 FROM sb.queue WHERE name = q);
SELECT sb.grant_send('/Rekenserver/LoonfactorBerekening/RekenService', 'sbworker_worker');
SELECT sb.grant_send('/Rekenserver/LoonfactorBerekening/DataService', 'sbworker_worker');
SELECT sb.grant_send('/Rekenserver/LoonfactorBerekening/RekenService', 'sbworker_sender');
SELECT sb.grant_send('/Rekenserver/LoonfactorBerekening/RekenService', 'sbworker_housekeeping');

-- The roster and the sweep, where they are installed (004_roster.sql, 005_housekeeping.sql).
DO $$
BEGIN
    IF pg_catalog.to_regclass('rooster.tijdblok') IS NOT NULL THEN
        REVOKE ALL ON SCHEMA rooster FROM PUBLIC;
        REVOKE ALL ON ALL TABLES IN SCHEMA rooster FROM PUBLIC;
        REVOKE ALL ON ALL FUNCTIONS IN SCHEMA rooster FROM PUBLIC;
        GRANT USAGE ON SCHEMA rooster TO sbworker_sender;
        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA rooster TO sbworker_sender;
        GRANT USAGE ON ALL SEQUENCES IN SCHEMA rooster TO sbworker_sender;
    END IF;
    IF pg_catalog.to_regclass('rekenserver.run_log') IS NOT NULL THEN
        GRANT SELECT, INSERT, UPDATE, DELETE ON rekenserver.run_log TO sbworker_housekeeping;
        GRANT SELECT ON rekenserver.verouderde_sleutel TO sbworker_housekeeping;
        -- The retention of answered requests (not the Vraag in flight: no SELECT on vraag).
        GRANT SELECT (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, beantwoord_op, uitkomst), DELETE
            ON rekenserver.berekening_log TO sbworker_housekeeping;
        GRANT SELECT (dienstverband_id, periode_id, versie, dialog_handle) ON rekenserver.sleutel TO sbworker_housekeeping;
    END IF;
END $$;

-- Grants a group role to a login (`sbworker install --worker-role LOGIN …`).
CREATE OR REPLACE FUNCTION sb.grant_role(p_role text, p_login text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF p_role NOT IN ('sbworker_worker', 'sbworker_sender', 'sbworker_payroll', 'sbworker_housekeeping',
                      'sbworker_monitor') THEN
        PERFORM sb.fail('22023', format('%s is not one of sbworker''s roles', p_role));
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = p_login) THEN
        PERFORM sb.fail('42704', format('role %s does not exist: create the login first', p_login));
    END IF;
    EXECUTE format('GRANT %I TO %I', p_role, p_login);
END $$;
REVOKE ALL ON FUNCTION sb.grant_role(text, text) FROM PUBLIC;

INSERT INTO sb.migration (version) VALUES (6) ON CONFLICT DO NOTHING;

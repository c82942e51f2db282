-- sbworker PostgreSQL broker, version 3: the calculation service of the original system and what
-- its two sides keep.
--
-- Idempotent. The message types, contract, queues and services of the calculation
-- dialog; on the initiator's side (schema "rekenserver") the stored results, a log of
-- stored versions and the calculation log; on the calculation side (schema "sbworker")
-- the newest version answered per key, so that superseded requests are not computed.

SELECT sb.create_message_type('/Rekenserver/LoonfactorBerekening/Vraag', 'WELL_FORMED_XML');
SELECT sb.create_message_type('/Rekenserver/LoonfactorBerekening/Antwoord', 'WELL_FORMED_XML');
SELECT sb.create_message_type('/Rekenserver/Fout', 'WELL_FORMED_XML');
SELECT sb.create_contract('/Rekenserver/LoonfactorBerekening/DataContract', ARRAY[
    ['/Rekenserver/LoonfactorBerekening/Vraag', 'INITIATOR'],
    ['/Rekenserver/LoonfactorBerekening/Antwoord', 'TARGET'],
    ['/Rekenserver/Fout', 'TARGET']]);
-- The answers come back to the data side's queue; the requests go to the calculation's.
-- Split over two databases (sb.side(): docs/deployment.md), each holds its own service
-- and queue, and reaches the other's over a route (008_routes.sql).
SELECT sb.create_queue('loonfactorberekening_data')
 WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'loonfactorberekening_data') AND sb.side() <> 'calc';
SELECT sb.create_queue('loonfactorberekening_reken')
 WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'loonfactorberekening_reken') AND sb.side() <> 'roster';
-- sbworker's own attempt accounting is the poison rule on the queues it serves: the
-- broker's (a queue disabled after 5 rolled-back receives in a row) would count
-- deadlocks and dropped connections too. See docs/retries.md.
SELECT sb.alter_queue(q, p_poison_handling => false)
  FROM unnest(ARRAY['loonfactorberekening_data', 'loonfactorberekening_reken']) AS q
 WHERE EXISTS (SELECT 1 FROM sb.queue WHERE name = q);
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/DataService', 'loonfactorberekening_data')
 WHERE sb.side() <> 'calc';
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/RekenService', 'loonfactorberekening_reken',
                         ARRAY['/Rekenserver/LoonfactorBerekening/DataContract'])
 WHERE sb.side() <> 'roster';
-- Recompute (`sbworker recompute`) begins its dialogs on a contract of its own (the same
-- messages, the same services: a key's dialogs share its conversation group, which on
-- SQL Server holds the conversations of one service), so that a conversation priority
-- can tell them from the planners': level 3 on both sides, below the planners' default
-- 5, and RECEIVE serves the higher level first. docs/operations.md.
SELECT sb.create_contract('/Rekenserver/LoonfactorBerekening/HerberekenContract', ARRAY[
    ['/Rekenserver/LoonfactorBerekening/Vraag', 'INITIATOR'],
    ['/Rekenserver/LoonfactorBerekening/Antwoord', 'TARGET'],
    ['/Rekenserver/Fout', 'TARGET']]);
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/RekenService', 'loonfactorberekening_reken',
                         ARRAY['/Rekenserver/LoonfactorBerekening/HerberekenContract'])
 WHERE sb.side() <> 'roster';
SELECT sb.create_broker_priority('herberekening', '/Rekenserver/LoonfactorBerekening/HerberekenContract',
    NULL, NULL, 3);
-- A key's dialog kept open for its next versions (conversation reuse: the setting
-- 'dialog_reuse_idle_seconds' of rekenserver.instelling; off without it) goes on a
-- contract of its own, so that each side knows from the dialog that it does not end with
-- an answer: the collector ends it once the key has been idle that long (its
-- conversation timer), and the calculation side ends on the EndDialog. The same
-- messages, the same services.
SELECT sb.create_contract('/Rekenserver/LoonfactorBerekening/SleutelContract', ARRAY[
    ['/Rekenserver/LoonfactorBerekening/Vraag', 'INITIATOR'],
    ['/Rekenserver/LoonfactorBerekening/Antwoord', 'TARGET'],
    ['/Rekenserver/Fout', 'TARGET']]);
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/RekenService', 'loonfactorberekening_reken',
                         ARRAY['/Rekenserver/LoonfactorBerekening/SleutelContract'])
 WHERE sb.side() <> 'roster';

-- The calculation side: per (dienstverband, periode) the newest roster version it has
-- answered. The receiving transaction claims a version here (holding the row lock to
-- its end, which serialises one key on this side); an older or equal version finds a
-- newer one answered and is answered as superseded without computing.
CREATE TABLE IF NOT EXISTS sbworker.answered_version (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    answered_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dienstverband_id, periode_id)
);

-- The initiator's side ---------------------------------------------------------------
CREATE SCHEMA IF NOT EXISTS rekenserver;

-- The stored wage factors of a (dienstverband, periode): the result of roster version
-- `versie`. Replaced only by a newer version (latest wins), in one transaction.
CREATE TABLE IF NOT EXISTS rekenserver.resultaat (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    vraag_id         uuid NOT NULL,
    dialog_handle    uuid NOT NULL,
    opgeslagen_op    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- The hand-off to payroll (sbworker export): 0 waiting, 1 claimed under a lease,
    -- 2 exported (confirmed, or claimed in mode once). A newer version starts at 0.
    export_status    smallint NOT NULL DEFAULT 0 CHECK (export_status IN (0, 1, 2)),
    export_batch     uuid,
    geclaimd_op      timestamptz,
    geexporteerd_op  timestamptz,
    PRIMARY KEY (dienstverband_id, periode_id)
);
-- (Indexes and columns only when missing: see 001_broker.sql.)
DO $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.resultaat_export') IS NULL THEN
        CREATE INDEX IF NOT EXISTS resultaat_export ON rekenserver.resultaat (periode_id, export_status);
    END IF;
    IF pg_catalog.to_regclass('rekenserver.resultaat_batch') IS NULL THEN
        CREATE INDEX IF NOT EXISTS resultaat_batch ON rekenserver.resultaat (export_batch) WHERE export_batch IS NOT NULL;
    END IF;
END $$;

CREATE TABLE IF NOT EXISTS rekenserver.resultaat_factor (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    kaart_soort      int NOT NULL,
    loonfactor_code  text NOT NULL,
    waarde           numeric(18,4) NOT NULL,
    PRIMARY KEY (dienstverband_id, periode_id, loonfactor_code)
);
-- No foreign key to rekenserver.resultaat: the collector's store
-- (rekenserver.sla_antwoord_op) is the only writer, and writes a key's result row and
-- its factors in one transaction under the result row's lock, the row first; no role
-- may delete a result (006_security.sql) but through the self-test's clean-up of its
-- scratch key, which deletes the factors first (005_housekeeping.sql). The check cost 17 statements and about 70
-- buffers per stored answer (docs/benchmarks.md, "The work budget"). Installs from
-- before drop it, once.
DO $$
DECLARE
    v_fk name;
BEGIN
    FOR v_fk IN SELECT conname FROM pg_catalog.pg_constraint
                 WHERE conrelid = 'rekenserver.resultaat_factor'::regclass AND contype = 'f'
    LOOP
        EXECUTE format('ALTER TABLE rekenserver.resultaat_factor DROP CONSTRAINT %I', v_fk);
    END LOOP;
END $$;

-- Every version ever stored, in the order it was stored (for audits and the tests: a
-- key's versions here only grow).
CREATE TABLE IF NOT EXISTS rekenserver.resultaat_historie (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    opgeslagen_op    timestamptz NOT NULL DEFAULT clock_timestamp()
);
DO $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.resultaat_historie_key') IS NULL THEN
        CREATE INDEX IF NOT EXISTS resultaat_historie_key
            ON rekenserver.resultaat_historie (dienstverband_id, periode_id, id);
    END IF;
END $$;

-- One row per Vraag sent (the original system's LoonfactorBerekeningLog): written by the sender,
-- completed by the collector with the outcome (opgeslagen: stored; verouderd: an answer
-- older than the stored result; vervangen: answered as superseded by the calculation;
-- fout: a Fout or an error end, with the reason).
CREATE TABLE IF NOT EXISTS rekenserver.berekening_log (
    dialog_handle    uuid NOT NULL,
    vraag_id         uuid NOT NULL,
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    verzonden_op     timestamptz NOT NULL DEFAULT clock_timestamp(),
    beantwoord_op    timestamptz,
    uitkomst         text CHECK (uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')),
    foutmelding      text,
    PRIMARY KEY (dialog_handle, vraag_id)
);
DO $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.berekening_log_open') IS NULL THEN
        CREATE INDEX IF NOT EXISTS berekening_log_open ON rekenserver.berekening_log (dienstverband_id, periode_id)
            WHERE uitkomst IS NULL;
    END IF;
    -- The Fouts by key (the web page's search and a key's Fout): partial, so a request
    -- answered with anything else writes no entry (the column the predicate reads is in
    -- the index below already, so no update of a row became less HOT by it). A plain
    -- CREATE INDEX: on a large log, upgrade in a quiet hour (the collector's writes wait
    -- while it builds).
    IF pg_catalog.to_regclass('rekenserver.berekening_log_fout') IS NULL THEN
        CREATE INDEX IF NOT EXISTS berekening_log_fout ON rekenserver.berekening_log (dienstverband_id, periode_id, versie)
            WHERE uitkomst = 'fout';
    END IF;
    -- The sweep's retention of answered requests (`[sweep] retention_days`): by outcome,
    -- then when it came, so requests in flight are never read, and of the rows it keeps
    -- only each key's current Fouts are read again on each run.
    IF pg_catalog.to_regclass('rekenserver.berekening_log_beantwoord') IS NULL THEN
        CREATE INDEX IF NOT EXISTS berekening_log_beantwoord ON rekenserver.berekening_log (uitkomst, beantwoord_op);
    END IF;
END $$;
-- A reused dialog carries several requests, and a replay sends a Vraag again on a new
-- dialog: a row per request and dialog. (An install from before kept a row per dialog,
-- when each dialog carried one.)
DO $$
BEGIN
    IF (SELECT array_length(c.conkey, 1) FROM pg_catalog.pg_constraint c
         WHERE c.conrelid = 'rekenserver.berekening_log'::regclass AND c.contype = 'p') = 1 THEN
        ALTER TABLE rekenserver.berekening_log DROP CONSTRAINT berekening_log_pkey;
        ALTER TABLE rekenserver.berekening_log ADD PRIMARY KEY (dialog_handle, vraag_id);
    END IF;
END $$;

-- Evidence of every stored result (`sbworker explain`): the Vraag as sent is kept in
-- the log row of its request (text; PostgreSQL compresses a long value itself), and the
-- collector copies it, with the Antwoord's factors, into the stored version's
-- resultaat_historie row. Pruned by the sweep after the retention (`[sweep]
-- evidence_retention_months`), the latest version of each key excepted.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'rekenserver.berekening_log'::regclass AND attname = 'vraag'
                      AND NOT attisdropped) THEN
        ALTER TABLE rekenserver.berekening_log ADD COLUMN IF NOT EXISTS vraag text;
    END IF;
END $$;
DO $$
DECLARE
    v_has name[] := ARRAY(SELECT attname FROM pg_catalog.pg_attribute
                           WHERE attrelid = 'rekenserver.resultaat'::regclass AND NOT attisdropped);
BEGIN
    -- A result that replaces one exported before is a correction: the exported version it
    -- replaces, set when it is stored (the export marks it in its output).
    IF NOT 'vorige_export_versie' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat ADD COLUMN IF NOT EXISTS vorige_export_versie bigint;
    END IF;
    -- The version payroll received (once) or may hold (claimed under a lease): set by the
    -- claim, kept when a version with the same figures is stored (which moves `versie` but
    -- sends nothing), so the next correction names what payroll has. Rows claimed before
    -- the column existed take their own version (the best there is to know).
    IF NOT 'geexporteerde_versie' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat ADD COLUMN IF NOT EXISTS geexporteerde_versie bigint;
    END IF;
    -- The stored version's warnings (the Antwoord's Waarschuwing elements, as
    -- [{"code": …, "tekst": …}], NULL for none): the export hands them to payroll with the
    -- figures (overtime no percentage is paid for, a contract above the CAO's maximum, …).
    IF NOT 'waarschuwingen' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat ADD COLUMN IF NOT EXISTS waarschuwingen jsonb;
    END IF;
END $$;
UPDATE rekenserver.resultaat SET geexporteerde_versie = versie
 WHERE geexporteerde_versie IS NULL AND export_status IN (1, 2);
DO $$
DECLARE
    v_has name[] := ARRAY(SELECT attname FROM pg_catalog.pg_attribute
                           WHERE attrelid = 'rekenserver.resultaat_historie'::regclass AND NOT attisdropped);
BEGIN
    IF NOT 'vraag' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat_historie ADD COLUMN IF NOT EXISTS vraag text;
    END IF;
    IF NOT 'factoren' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat_historie ADD COLUMN IF NOT EXISTS factoren jsonb;
    END IF;
    -- What computed it (the Antwoord's Rekenversie: the engine's version, the tables').
    IF NOT 'rekenversie' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat_historie ADD COLUMN IF NOT EXISTS rekenversie text;
    END IF;
    -- When the version went out to payroll (the export writes it; the first time).
    IF NOT 'geexporteerd_op' = ANY (v_has) THEN
        ALTER TABLE rekenserver.resultaat_historie ADD COLUMN IF NOT EXISTS geexporteerd_op timestamptz;
    END IF;
END $$;
-- When a newer version replaced this one (the collector stamps it as it stores the
-- newer; NULL: the key's latest). The retention counts from it and finds what it may
-- delete through its index alone, which holds replaced versions only: a key's latest
-- version, kept however old, costs the sweep nothing. Versions stored before the column
-- existed take their successor's time, once.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'rekenserver.resultaat_historie'::regclass AND attname = 'vervangen_op'
                      AND NOT attisdropped) THEN
        ALTER TABLE rekenserver.resultaat_historie ADD COLUMN vervangen_op timestamptz;
        UPDATE rekenserver.resultaat_historie h
           SET vervangen_op = (SELECT min(n.opgeslagen_op) FROM rekenserver.resultaat_historie n
                                WHERE n.dienstverband_id = h.dienstverband_id AND n.periode_id = h.periode_id
                                  AND n.versie > h.versie)
         WHERE EXISTS (SELECT 1 FROM rekenserver.resultaat_historie n
                        WHERE n.dienstverband_id = h.dienstverband_id AND n.periode_id = h.periode_id
                          AND n.versie > h.versie);
    END IF;
END $$;
DO $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.resultaat_historie_vervangen') IS NULL THEN
        CREATE INDEX IF NOT EXISTS resultaat_historie_vervangen ON rekenserver.resultaat_historie (vervangen_op)
         WHERE vervangen_op IS NOT NULL;
    END IF;
END $$;
-- The retention's index of the builds before (by opgeslagen_op), which nothing reads now.
DROP INDEX IF EXISTS rekenserver.resultaat_historie_opgeslagen;

-- Whether a failure (uitkomst 'fout') was the environment's, not the request's, so that
-- the sweep sends the same version again: an internal Fout (a diversion), an error end
-- (a diversion that sent no Fout, an expired LIFETIME, a broker error), a lost dialog
-- (rekenserver.markeer_verloren). Written by whoever records the failure, never parsed
-- from the text; rows of an older install get it from their text, once.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns
                    WHERE table_schema = 'rekenserver' AND table_name = 'berekening_log'
                      AND column_name = 'herstelbaar') THEN
        ALTER TABLE rekenserver.berekening_log ADD COLUMN herstelbaar boolean;
        UPDATE rekenserver.berekening_log
           SET herstelbaar = (foutmelding LIKE 'internal (%' OR foutmelding LIKE 'error %')
         WHERE uitkomst = 'fout';
    END IF;
END $$;

-- Settings of the database side. One so far: the LIFETIME, in seconds, of every dialog
-- the roster and a replay begin (no row: 7 days). A dialog still open then ends with
-- the broker's error -8489 on both sides, which the collector records as the
-- environment's fault, so the sweep sends its key again: a lost request is found, at
-- the latest, a lifetime after it was sent. It must outlive the longest backlog.
--   INSERT INTO rekenserver.instelling VALUES ('dialog_lifetime_seconds', 86400)
--       ON CONFLICT (naam) DO UPDATE SET waarde = EXCLUDED.waarde;
CREATE TABLE IF NOT EXISTS rekenserver.instelling (
    naam   text PRIMARY KEY CHECK (naam IN ('dialog_lifetime_seconds')),
    waarde bigint NOT NULL CHECK (waarde BETWEEN 1 AND 2147483647)
);
-- The second setting: 'dialog_reuse_idle_seconds', conversation reuse. With it, a key's
-- dialog (on the contract SleutelContract) carries the key's next versions, and ends once
-- the key has had no request open for that many seconds (no row: a dialog per request).
-- Recomputes and the self-test's scratch key keep a dialog per request.
-- (Changed only where it is still the first version's: the change locks the table.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_constraint
                    WHERE conrelid = 'rekenserver.instelling'::regclass AND conname = 'instelling_naam_check'
                      AND pg_catalog.pg_get_constraintdef(oid) LIKE '%dialog_reuse_idle_seconds%') THEN
        ALTER TABLE rekenserver.instelling DROP CONSTRAINT IF EXISTS instelling_naam_check;
        ALTER TABLE rekenserver.instelling ADD CONSTRAINT instelling_naam_check
            CHECK (naam IN ('dialog_lifetime_seconds', 'dialog_reuse_idle_seconds'));
    END IF;
END $$;

CREATE OR REPLACE FUNCTION rekenserver.dialoog_hergebruik() RETURNS int
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT waarde FROM rekenserver.instelling WHERE naam = 'dialog_reuse_idle_seconds'), 0);
END $$;

CREATE OR REPLACE FUNCTION rekenserver.dialog_levensduur() RETURNS int
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN coalesce((SELECT waarde FROM rekenserver.instelling WHERE naam = 'dialog_lifetime_seconds'), 604800);
END $$;

-- The storage of the hot rows. Room on each page for a row's next version (fillfactor
-- 80): a key's row updated without changing an indexed column then stays on its page,
-- with no new index entry (a HOT update): the calculation's version claim, and the
-- stored result (its indexed columns mostly keep their values). The Vraag's copies
-- compressed with lz4 where the server has it, faster than PostgreSQL's own pglz; the
-- rows already written keep theirs. Each once: SET COMPRESSION takes the table (ACCESS
-- EXCLUSIVE) until the install commits (docs/deployment.md: the upgrade to this
-- release); fillfactor does not stop reads or writes.
DO $$
BEGIN
    IF NOT 'fillfactor=80' = ANY (coalesce((SELECT reloptions FROM pg_catalog.pg_class
                                             WHERE oid = 'sbworker.answered_version'::regclass), '{}')) THEN
        ALTER TABLE sbworker.answered_version SET (fillfactor = 80);
    END IF;
    IF NOT 'fillfactor=80' = ANY (coalesce((SELECT reloptions FROM pg_catalog.pg_class
                                             WHERE oid = 'rekenserver.resultaat'::regclass), '{}')) THEN
        ALTER TABLE rekenserver.resultaat SET (fillfactor = 80);
    END IF;
    IF EXISTS (SELECT 1 FROM pg_catalog.pg_settings WHERE name = 'default_toast_compression' AND 'lz4' = ANY (enumvals)) THEN
        IF (SELECT attcompression FROM pg_catalog.pg_attribute
             WHERE attrelid = 'rekenserver.berekening_log'::regclass AND attname = 'vraag') <> 'l' THEN
            ALTER TABLE rekenserver.berekening_log ALTER COLUMN vraag SET COMPRESSION lz4;
        END IF;
        IF (SELECT attcompression FROM pg_catalog.pg_attribute
             WHERE attrelid = 'rekenserver.resultaat_historie'::regclass AND attname = 'vraag') <> 'l' THEN
            ALTER TABLE rekenserver.resultaat_historie ALTER COLUMN vraag SET COMPRESSION lz4;
        END IF;
    END IF;
END $$;

-- Stores an Antwoord: replaces the key's factors when its version is newer than the
-- stored one (never otherwise, so a stored result never goes back), logs the version,
-- and completes the calculation log. Returns the outcome.
-- (p_rekenversie and p_waarschuwingen came later: the function of an older install is
-- replaced, not overloaded; an older worker's call without them still resolves.)
DROP FUNCTION IF EXISTS rekenserver.sla_antwoord_op(uuid, uuid, int, int, bigint, boolean, int[], text[], numeric[]);
DROP FUNCTION IF EXISTS rekenserver.sla_antwoord_op(uuid, uuid, int, int, bigint, boolean, int[], text[], numeric[],
    text);
CREATE OR REPLACE FUNCTION rekenserver.sla_antwoord_op(p_handle uuid, p_vraag_id uuid, p_dv int, p_periode int,
    p_versie bigint, p_vervangen boolean, p_kaart_soorten int[], p_codes text[], p_waarden numeric[],
    p_rekenversie text DEFAULT NULL, p_waarschuwingen jsonb DEFAULT NULL)
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_uitkomst text := 'vervangen';
    v_log      rekenserver.berekening_log;
    v_zelfde   boolean;
    v_status   smallint;
BEGIN
    -- The answer must be for the request its dialog carried: an answer naming another
    -- key or version is refused (the transaction fails; after the worker's attempts it
    -- is set aside), never stored under the wrong key.
    -- (A reused dialog carries several: the request is the one the Antwoord names.)
    SELECT * INTO v_log FROM rekenserver.berekening_log WHERE vraag_id = p_vraag_id AND dialog_handle = p_handle;
    IF NOT FOUND THEN
        SELECT * INTO v_log FROM rekenserver.berekening_log WHERE dialog_handle = p_handle
         ORDER BY versie DESC LIMIT 1;
    END IF;
    IF FOUND AND (v_log.dienstverband_id, v_log.periode_id, v_log.versie, v_log.vraag_id)
                 IS DISTINCT FROM (p_dv, p_periode, p_versie, p_vraag_id) THEN
        PERFORM sb.fail('22023', format(
            'the Antwoord on dialog %s is for dienstverband %s, periode %s, version %s, Vraag %s; the dialog '
            || 'carried dienstverband %s, periode %s, version %s, Vraag %s', p_handle, p_dv, p_periode, p_versie,
            p_vraag_id, v_log.dienstverband_id, v_log.periode_id, v_log.versie, v_log.vraag_id));
    END IF;
    IF NOT p_vervangen THEN
        -- The same factors as the stored result (a recompute that changed nothing): the
        -- new version is stored, but its export state stays (payroll has these figures;
        -- no correction is sent for nothing). Only a result claimed or exported has an
        -- export state to keep: one still waiting (the pipeline's usual case) is not
        -- compared. A factor at 0 and a factor absent are the same figure (a release that
        -- adds a factor answers it at 0: that is no correction for payroll).
        -- The row is locked before its export state is read (N8 of the fourth SQL Server
        -- review): a claim between the read and the update would make the same figures a
        -- correction. (The update below locks it anyway; this only takes it sooner.)
        v_zelfde := false;
        SELECT export_status INTO v_status FROM rekenserver.resultaat
         WHERE dienstverband_id = p_dv AND periode_id = p_periode FOR UPDATE;
        IF v_status <> 0 THEN
            v_zelfde := NOT EXISTS (
                    SELECT u.k, u.c, u.w FROM unnest(p_kaart_soorten, p_codes, p_waarden) AS u(k, c, w) WHERE u.w <> 0
                    EXCEPT SELECT f.kaart_soort, f.loonfactor_code, f.waarde FROM rekenserver.resultaat_factor f
                            WHERE f.dienstverband_id = p_dv AND f.periode_id = p_periode)
                AND NOT EXISTS (
                    SELECT f.kaart_soort, f.loonfactor_code, f.waarde FROM rekenserver.resultaat_factor f
                     WHERE f.dienstverband_id = p_dv AND f.periode_id = p_periode AND f.waarde <> 0
                    EXCEPT SELECT u.k, u.c, u.w FROM unnest(p_kaart_soorten, p_codes, p_waarden) AS u(k, c, w));
        END IF;
        INSERT INTO rekenserver.resultaat AS r (dienstverband_id, periode_id, versie, vraag_id, dialog_handle,
                                                waarschuwingen)
        VALUES (p_dv, p_periode, p_versie, p_vraag_id, p_handle, p_waarschuwingen)
        ON CONFLICT (dienstverband_id, periode_id) DO UPDATE
            SET versie = EXCLUDED.versie, vraag_id = EXCLUDED.vraag_id, dialog_handle = EXCLUDED.dialog_handle,
                opgeslagen_op = clock_timestamp(), waarschuwingen = EXCLUDED.waarschuwingen,
                -- Exported, or claimed under a lease (payroll may hold it already): the
                -- new version corrects it.
                -- The version payroll has, not the stored one: a version with the same
                -- figures may have moved `versie` past it.
                vorige_export_versie = CASE WHEN v_zelfde THEN r.vorige_export_versie
                                            WHEN r.export_status IN (1, 2) THEN coalesce(r.geexporteerde_versie, r.versie)
                                            ELSE r.vorige_export_versie END,
                export_status = CASE WHEN v_zelfde THEN r.export_status ELSE 0 END,
                export_batch = CASE WHEN v_zelfde THEN r.export_batch END,
                geclaimd_op = CASE WHEN v_zelfde THEN r.geclaimd_op END,
                geexporteerd_op = CASE WHEN v_zelfde THEN r.geexporteerd_op END
            WHERE r.versie < EXCLUDED.versie;
        IF FOUND THEN
            v_uitkomst := 'opgeslagen';
            DELETE FROM rekenserver.resultaat_factor WHERE dienstverband_id = p_dv AND periode_id = p_periode;
            INSERT INTO rekenserver.resultaat_factor (dienstverband_id, periode_id, kaart_soort, loonfactor_code, waarde)
            SELECT p_dv, p_periode, k, c, w FROM unnest(p_kaart_soorten, p_codes, p_waarden) AS u(k, c, w);
            -- The version it replaces is stamped (the retention counts from then), in
            -- the same statement.
            WITH vervangen AS (
                UPDATE rekenserver.resultaat_historie SET vervangen_op = clock_timestamp()
                 WHERE dienstverband_id = p_dv AND periode_id = p_periode AND vervangen_op IS NULL
            )
            INSERT INTO rekenserver.resultaat_historie (dienstverband_id, periode_id, versie, vraag, factoren, rekenversie)
            VALUES (p_dv, p_periode, p_versie, v_log.vraag,
                    (SELECT jsonb_object_agg(u.c, u.w) FROM unnest(p_codes, p_waarden) AS u(c, w)), p_rekenversie);
        ELSE
            v_uitkomst := 'verouderd';
        END IF;
    END IF;
    -- The Vraag kept for the evidence leaves the log with the outcome (copied above when
    -- the result was stored): the log keeps no salary data of its own.
    UPDATE rekenserver.berekening_log SET beantwoord_op = clock_timestamp(), uitkomst = v_uitkomst, vraag = NULL
     WHERE vraag_id = p_vraag_id AND dialog_handle = p_handle;
    -- A reused dialog with no request left open and no idle timer: its idle timer
    -- starts. Its DialogTimer reaches the collector, which ends the dialog if the key
    -- has been idle since (rekenserver.dialoog_stil), or sets it again to the idle time
    -- after the key's last answer. Set once per idle window, not after every answer: a
    -- timer set again locks the dialog's endpoint (a planner's send on it waits) and
    -- leaves a dead index entry each time.
    IF EXISTS (SELECT 1 FROM sb.endpoint
                WHERE handle = p_handle AND contract = '/Rekenserver/LoonfactorBerekening/SleutelContract')
       AND NOT EXISTS (SELECT 1 FROM rekenserver.berekening_log WHERE dialog_handle = p_handle AND uitkomst IS NULL)
       AND NOT EXISTS (SELECT 1 FROM sb.conversation_timer WHERE handle = p_handle) THEN
        -- The key's row first, then the dialog's endpoint (the timer locks it): the order
        -- the roster's send takes them in (rekenserver.stuur_vraag, then sb.send_if_ready)
        -- and rekenserver.dialoog_stil too. Taken the other way round, a collector arming
        -- the timer of a key's new dialog and firing one of its old dialog in the same
        -- transaction could deadlock with a planner sending on the new one.
        PERFORM 1 FROM rekenserver.sleutel WHERE dienstverband_id = p_dv AND periode_id = p_periode FOR UPDATE;
        PERFORM sb.begin_conversation_timer(p_handle, greatest(rekenserver.dialoog_hergebruik(), 1));
    END IF;
    RETURN v_uitkomst;
END $$;

-- Records a Fout (or an error end without one) for the dialog, and whether sending the
-- same version again can succeed (p_herstelbaar: the environment's fault). The first
-- record of a request stands. A worker of an older release passes no p_herstelbaar: it
-- is then read from the text, in the formats that release wrote.
-- With p_eerste (a Fout, which answers one request): the oldest request still open on
-- the dialog gets it (a dialog's messages come in order). On a reused dialog the
-- requests sent after it are lost with the dialog, which the calculation ends with the
-- Fout's error: they are recorded as the environment's, and their key's current version
-- is sent again at once, on a new dialog.
DROP FUNCTION IF EXISTS rekenserver.noteer_fout(uuid, text);
DROP FUNCTION IF EXISTS rekenserver.noteer_fout(uuid, text, boolean);
CREATE OR REPLACE FUNCTION rekenserver.noteer_fout(p_handle uuid, p_melding text, p_herstelbaar boolean DEFAULT NULL,
    p_eerste boolean DEFAULT false)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_eerste  uuid;
    v_dv      int;
    v_periode int;
BEGIN
    IF p_eerste THEN
        SELECT vraag_id INTO v_eerste FROM rekenserver.berekening_log
         WHERE dialog_handle = p_handle AND uitkomst IS NULL ORDER BY versie, verzonden_op LIMIT 1;
        IF FOUND THEN
            UPDATE rekenserver.berekening_log
               SET beantwoord_op = clock_timestamp(), uitkomst = 'fout', vraag = NULL, foutmelding = p_melding,
                   herstelbaar = coalesce(p_herstelbaar, p_melding LIKE 'internal (%'
                                          OR p_melding LIKE 'newer-contract (%' OR p_melding LIKE 'error %')
             WHERE dialog_handle = p_handle AND vraag_id = v_eerste;
            UPDATE rekenserver.berekening_log
               SET beantwoord_op = clock_timestamp(), uitkomst = 'fout', vraag = NULL, herstelbaar = true,
                   foutmelding = 'lost: the dialog ended with the Fout of an earlier request on it; sent again'
             WHERE dialog_handle = p_handle AND uitkomst IS NULL;
            IF FOUND THEN
                SELECT dienstverband_id, periode_id INTO v_dv, v_periode FROM rekenserver.berekening_log
                 WHERE dialog_handle = p_handle AND vraag_id = v_eerste;
                -- Never on this dialog again (the collector is about to end it).
                UPDATE rekenserver.sleutel SET dialog_handle = NULL
                 WHERE dienstverband_id = v_dv AND periode_id = v_periode AND dialog_handle = p_handle;
                PERFORM rekenserver.stuur_vraag(v_dv, v_periode);
            END IF;
            RETURN;
        END IF;
    END IF;
    UPDATE rekenserver.berekening_log
       SET beantwoord_op = coalesce(beantwoord_op, clock_timestamp()), uitkomst = 'fout', vraag = NULL,
           foutmelding = coalesce(foutmelding, p_melding),
           herstelbaar = coalesce(herstelbaar, p_herstelbaar, p_melding LIKE 'internal (%'
                                  OR p_melding LIKE 'newer-contract (%' OR p_melding LIKE 'error %')
     WHERE dialog_handle = p_handle AND (uitkomst IS NULL OR uitkomst = 'fout');
END $$;

-- A reused dialog's idle timer has fired (the collector received its DialogTimer): true
-- when the key has been idle on it for the idle time (no request open, no answer since;
-- the dialog is then no longer the key's, and the collector ends it); false when not.
-- With a request open the timer stays unset: the answer sets it (sla_antwoord_op). With
-- none open but an answer within the idle time, it is set again, to the idle time after
-- that answer. So the dialog ends when it would have had its timer been set after every
-- answer, with at most one DialogTimer more per idle window. Under the key's row lock, which rekenserver.stuur_vraag holds while it
-- chooses the dialog and sends, so that a request is never sent on a dialog being ended.
CREATE OR REPLACE FUNCTION rekenserver.dialoog_stil(p_handle uuid) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_dv      int;
    v_periode int;
    v_open    boolean;
    v_laatste timestamptz;
    v_stil    int := greatest(rekenserver.dialoog_hergebruik(), 1);
BEGIN
    SELECT dienstverband_id, periode_id INTO v_dv, v_periode FROM rekenserver.berekening_log
     WHERE dialog_handle = p_handle LIMIT 1;
    IF FOUND THEN
        PERFORM 1 FROM rekenserver.sleutel WHERE dienstverband_id = v_dv AND periode_id = v_periode FOR UPDATE;
        SELECT bool_or(uitkomst IS NULL), max(beantwoord_op) INTO v_open, v_laatste
          FROM rekenserver.berekening_log WHERE dialog_handle = p_handle;
        IF v_open THEN
            RETURN false;
        END IF;
        IF v_laatste > clock_timestamp() - make_interval(secs => v_stil) THEN
            PERFORM sb.begin_conversation_timer(p_handle,
                ceil(extract(epoch FROM v_laatste + make_interval(secs => v_stil) - clock_timestamp()))::int);
            RETURN false;
        END IF;
        UPDATE rekenserver.sleutel SET dialog_handle = NULL
         WHERE dienstverband_id = v_dv AND periode_id = v_periode AND dialog_handle = p_handle;
    END IF;
    RETURN true;
END $$;

-- The sweep's way to sb.expire_dialogs (housekeeping has no rights in schema sb): the
-- dialogs past their LIFETIME end with the broker's error on both sides.
CREATE OR REPLACE FUNCTION rekenserver.verlopen_dialogen() RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    RETURN sb.expire_dialogs();
END $$;

-- Lost dialogs: requests without an outcome whose dialog no longer exists at the data
-- side (its endpoint ended WITH CLEANUP, removed by sb.new_broker, or closed without an
-- answer). No answer can come for them any more, so they are recorded as failed by the
-- environment, and the sweep sends their keys again. The sweep runs this first; run it
-- by hand after anything that removes conversations. Returns how many it marked.
-- (A request in flight has its endpoint until the collector records its outcome and
-- ends it, in one transaction, so it is never marked.)
CREATE OR REPLACE FUNCTION rekenserver.markeer_verloren() RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    v_n      int;
    v_handle uuid;
    v_group  uuid;
BEGIN
    -- A dialog whose far side is gone while a request on it waits (an operator ended the
    -- calculation side WITH CLEANUP, say): in one database the far endpoint is seen to be
    -- missing (the initiator knows its handle, and nothing waits for the initiator that
    -- would say so), so the request is lost now, not when the lifetime runs out, and the
    -- initiator's own endpoint is ended with cleanup (nothing can reach it any more). A
    -- dialog a worker or collector holds is left for the next run.
    FOR v_handle, v_group IN
        SELECT i.handle, i.group_id FROM sb.endpoint i
         WHERE i.is_initiator AND i.far_handle IS NOT NULL
           -- (A far side in another database is never seen here: its dialog ends by the
           -- far side's answer, or by its LIFETIME.)
           AND i.route IS NULL
           AND NOT EXISTS (SELECT 1 FROM sb.endpoint t WHERE t.handle = i.far_handle)
           AND NOT EXISTS (SELECT 1 FROM sb.message m WHERE m.group_id = i.group_id AND m.handle = i.handle)
           AND EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                        WHERE l.dialog_handle = i.handle AND l.uitkomst IS NULL)
         ORDER BY i.handle
         FOR UPDATE OF i SKIP LOCKED
    LOOP
        -- As END CONVERSATION WITH CLEANUP does on this side (no message waits for it:
        -- checked above), without sb.end_conversation_cleanup's RECEIVE right check,
        -- which the sweep's login (housekeeping) does not pass on the data queue.
        DELETE FROM sb.endpoint WHERE handle = v_handle;
        IF NOT EXISTS (SELECT 1 FROM sb.message WHERE group_id = v_group) THEN
            DELETE FROM sb.group_ready WHERE group_id = v_group;
        END IF;
        PERFORM sb.drop_unused_groups(ARRAY[v_group]);
    END LOOP;
    UPDATE rekenserver.berekening_log l
       SET uitkomst = 'fout', herstelbaar = true, beantwoord_op = clock_timestamp(), vraag = NULL,
           foutmelding = 'lost: the dialog no longer exists (ended with cleanup, or the broker was reset) '
                         || 'without an answer'
     WHERE l.uitkomst IS NULL
       AND NOT EXISTS (SELECT 1 FROM sb.endpoint e WHERE e.handle = l.dialog_handle AND e.state <> 'CD');
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- The side of sbworker this database holds (sb.side(): both, roster or calc), for the
-- roster side's commands (export, sweep, recompute, explain), which refuse the
-- calculation side of a split install.
CREATE OR REPLACE FUNCTION rekenserver.install_side() RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT sb.side()
$$;

-- The export's claim (`sbworker export`, crates/core/src/handoff/export.rs): a period's
-- results claimed (p_lease_seconds NULL: once, marked exported; else leased, with the
-- claims older than the lease taken again), then their factors read. Two statements, so
-- the factors are read after the claim: a claim that waited for a collector's commit
-- takes the new version (the row as committed), and a statement's own snapshot would
-- still show the old factors under it. (The claimed rows stay locked until the caller
-- commits: no collector changes their factors in between.)
CREATE OR REPLACE FUNCTION rekenserver.export_claim(p_periode int, p_batch uuid, p_lease_seconds float8)
RETURNS TABLE (dienstverband_id int, periode_id int, versie bigint, kaart_soort int, loonfactor_code text,
               waarde text, vorige_export_versie bigint, waarschuwingen text)
LANGUAGE plpgsql AS $$
DECLARE
    v_dvs      int[];
    v_versies  bigint[];
    v_vorige   bigint[];
    v_waarsch  text[];
BEGIN
    WITH claimed AS (
        UPDATE rekenserver.resultaat r
           SET export_status = CASE WHEN p_lease_seconds IS NULL THEN 2 ELSE 1 END, export_batch = p_batch,
               geclaimd_op = clock_timestamp(),
               geexporteerd_op = CASE WHEN p_lease_seconds IS NULL THEN clock_timestamp() END,
               geexporteerde_versie = r.versie
         WHERE r.periode_id = p_periode
           AND (r.export_status = 0
                OR (p_lease_seconds IS NOT NULL AND r.export_status = 1
                    AND r.geclaimd_op < clock_timestamp() - make_interval(secs => p_lease_seconds)))
           AND EXISTS (SELECT 1 FROM rekenserver.resultaat_factor f
                        WHERE f.dienstverband_id = r.dienstverband_id AND f.periode_id = r.periode_id)
        RETURNING r.dienstverband_id, r.versie, r.vorige_export_versie, r.waarschuwingen::text
    )
    SELECT array_agg(c.dienstverband_id), array_agg(c.versie), array_agg(c.vorige_export_versie),
           array_agg(c.waarschuwingen)
      INTO v_dvs, v_versies, v_vorige, v_waarsch
      FROM claimed c;
    IF v_dvs IS NULL THEN
        RETURN;
    END IF;
    IF p_lease_seconds IS NULL THEN
        -- When the version went out, in its evidence (the first time).
        UPDATE rekenserver.resultaat_historie h SET geexporteerd_op = clock_timestamp()
          FROM unnest(v_dvs, v_versies) AS c(dv, versie)
         WHERE h.dienstverband_id = c.dv AND h.periode_id = p_periode AND h.versie = c.versie
           AND h.geexporteerd_op IS NULL;
    END IF;
    RETURN QUERY
    SELECT c.dv, p_periode, c.versie, f.kaart_soort, f.loonfactor_code, f.waarde::text, c.vorige, c.waarsch
      FROM unnest(v_dvs, v_versies, v_vorige, v_waarsch) AS c(dv, versie, vorige, waarsch)
      JOIN rekenserver.resultaat_factor f ON f.dienstverband_id = c.dv AND f.periode_id = p_periode
     ORDER BY c.dv, f.loonfactor_code;
END $$;

INSERT INTO sb.migration (version) VALUES (3) ON CONFLICT DO NOTHING;

-- sbworker PostgreSQL broker, version 4: a roster schema and its triggers (the sending
-- side of the pipeline, as in the original system).
--
-- Idempotent. Installed by `sbworker install --postgres URL --roster` and by the demo.
-- A planner's committed change sends one Vraag per (dienstverband, periode) it
-- touched, built here from the roster with PostgreSQL's XML functions, carrying a
-- roster version that only grows per key.
--
-- How "one Vraag per key per transaction" works: statement-level triggers (with
-- transition tables, so a 10,000-row statement is one trigger call) note the keys a
-- statement touched in rekenserver.te_berekenen, one row per key and transaction; a
-- deferred constraint trigger on that table runs once per row at COMMIT, when the
-- transaction's roster changes are complete: it raises the key's version (the row lock
-- orders concurrent transactions on one key), builds the Vraag from the roster as
-- committed so far plus this transaction's changes, and sends it.
--
-- Bulk imports: `SET rekenserver.vragen_uit = on` (per session or transaction) still
-- raises the versions but sends nothing; `sbworker sweep` sends the keys whose version
-- is newer than their stored result.

CREATE SCHEMA IF NOT EXISTS rooster;

CREATE TABLE IF NOT EXISTS rooster.cao (
    id            int PRIMARY KEY,
    code          text NOT NULL,
    is_vier_weken boolean NOT NULL,
    naam          text NOT NULL,
    werkweek_uren numeric(8,4) NOT NULL
);

-- Pay periods: months, or four-week periods for a CAO that counts in four weeks.
CREATE TABLE IF NOT EXISTS rooster.periode (
    id            int PRIMARY KEY,
    is_vier_weken boolean NOT NULL,
    begin_datum   date NOT NULL,
    eind_datum    date NOT NULL,
    CHECK (eind_datum >= begin_datum)
);

CREATE TABLE IF NOT EXISTS rooster.dienstverband (
    id                    int PRIMARY KEY,
    cao_id                int NOT NULL REFERENCES rooster.cao,
    dagen_per_week        numeric(8,4) NOT NULL,
    datum_in_dienst       date NOT NULL,
    datum_uit_dienst      date,
    parttime_uren         numeric(8,4),      -- NULL or 0: full time (the CAO's week)
    salaris               numeric(14,4),     -- full-time monthly salary
    garantie_toeslag      numeric(14,4),
    garantie_trede_bedrag numeric(14,4),
    loon_toeslag          numeric(14,4),
    soort                 text NOT NULL,     -- FT, PT, ...
    functiegroep          int NOT NULL
);

CREATE TABLE IF NOT EXISTS rooster.dienst_type (
    code                      text PRIMARY KEY,
    omschrijving              text NOT NULL,
    telt_mee_in_gewerkte_uren boolean NOT NULL
);

CREATE TABLE IF NOT EXISTS rooster.dienst (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dienstverband_id int NOT NULL REFERENCES rooster.dienstverband,
    datum            date NOT NULL
);
-- (Indexes and columns only when missing: see 001_broker.sql.)
DO $$
BEGIN
    IF pg_catalog.to_regclass('rooster.dienst_dv_datum') IS NULL THEN
        CREATE INDEX IF NOT EXISTS dienst_dv_datum ON rooster.dienst (dienstverband_id, datum);
    END IF;
END $$;

-- A block ends on the next day when its end is not after its begin.
CREATE TABLE IF NOT EXISTS rooster.tijdblok (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dienst_id   bigint NOT NULL REFERENCES rooster.dienst ON DELETE CASCADE,
    begin_tijd  time NOT NULL,
    eind_tijd   time NOT NULL,
    dienst_type text NOT NULL REFERENCES rooster.dienst_type,
    is_ziek     boolean NOT NULL DEFAULT false
);
DO $$
BEGIN
    IF pg_catalog.to_regclass('rooster.tijdblok_dienst') IS NULL THEN
        CREATE INDEX IF NOT EXISTS tijdblok_dienst ON rooster.tijdblok (dienst_id);
    END IF;
END $$;
-- Leave taken on the block's hours (the Vraag's Verlof): statutory vacation, the rest of
-- the vacation, other leave; NULL for work or sickness (a leave block is not sick). Added
-- to an existing install too. (A column constraint that reads is_ziek as well: PostgreSQL
-- takes it, and ADD COLUMN IF NOT EXISTS adds it exactly once, with the column.)
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'rooster.tijdblok'::regclass AND attname = 'verlof' AND NOT attisdropped) THEN
        ALTER TABLE rooster.tijdblok ADD COLUMN IF NOT EXISTS verlof text
            CONSTRAINT tijdblok_verlof
            CHECK (verlof IS NULL OR (verlof IN ('Wettelijk', 'Bovenwettelijk', 'Overig') AND NOT is_ziek));
    END IF;
END $$;

-- Per key: the roster version (only grows) and the initiator's conversation group for
-- its dialogs (RELATED_CONVERSATION_GROUP, as in the original system: the answers of one key
-- are received together, in order).
CREATE TABLE IF NOT EXISTS rekenserver.sleutel (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    group_id         uuid NOT NULL,
    gewijzigd_op     timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dienstverband_id, periode_id)
);
-- With conversation reuse: the key's open dialog (its initiator's handle), which carries
-- its next versions until the collector ends it idle.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_attribute
                    WHERE attrelid = 'rekenserver.sleutel'::regclass AND attname = 'dialog_handle'
                      AND NOT attisdropped) THEN
        ALTER TABLE rekenserver.sleutel ADD COLUMN IF NOT EXISTS dialog_handle uuid;
    END IF;
END $$;
-- Room on each page for a key's next version (fillfactor 80): the version's update
-- changes no indexed column and stays on its page (a HOT update, no index entry).
DO $$
BEGIN
    IF NOT 'fillfactor=80' = ANY (coalesce((SELECT reloptions FROM pg_catalog.pg_class
                                             WHERE oid = 'rekenserver.sleutel'::regclass), '{}')) THEN
        ALTER TABLE rekenserver.sleutel SET (fillfactor = 80);
    END IF;
END $$;

-- Keys whose Vraag could not be built at their current version (the dienstverband, its
-- CAO or the period is gone): recorded with the reason, left out of the sweep until the
-- key's version rises again, and never counted as sent.
CREATE TABLE IF NOT EXISTS rekenserver.onverzendbaar (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    reden            text NOT NULL,
    sinds            timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (dienstverband_id, periode_id)
);

-- Keys touched by the open transaction (rows live only until its COMMIT).
CREATE TABLE IF NOT EXISTS rekenserver.te_berekenen (
    xid              xid8 NOT NULL DEFAULT pg_current_xact_id(),
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    PRIMARY KEY (xid, dienstverband_id, periode_id)
);

-- The periods of a dienstverband that hold `datum` (months or four-week periods, as
-- its CAO counts). PL/pgSQL, not SQL: every function here has a pinned search_path
-- (006_security.sql), so a language sql function is not inlined into the triggers'
-- queries, and its body would be planned again on every trigger run; PL/pgSQL keeps
-- its plan for the session.
CREATE OR REPLACE FUNCTION rooster.perioden(p_dv int, p_datum date)
RETURNS SETOF int LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT p.id FROM rooster.dienstverband dv
      JOIN rooster.cao c ON c.id = dv.cao_id
      JOIN rooster.periode p ON p.is_vier_weken = c.is_vier_weken AND p_datum BETWEEN p.begin_datum AND p.eind_datum
     WHERE dv.id = p_dv;
END $$;

-- The Vraag of one key at roster version p_versie (NULL when the key has no
-- dienstverband or period). Listing 10's FOR XML PATH, in SQL/XML.
-- PL/pgSQL, not LANGUAGE sql: a SQL function's body is parsed and planned again in
-- every transaction that calls it (about 2 ms here for this query, two thirds of a
-- planner's commit), where PL/pgSQL keeps the plan for the session.
CREATE OR REPLACE FUNCTION rekenserver.vraag(p_dv int, p_periode int, p_versie bigint, p_id uuid)
RETURNS xml LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT xmlelement(name "LoonfactorBerekeningVraag",
        xmlattributes('http://www.sdbgroep.nl/MPlus/Rekenserver/2008' AS xmlns, upper(p_id::text) AS "Id",
            to_char(clock_timestamp() AT TIME ZONE 'Europe/Amsterdam', 'YYYY-MM-DD"T"HH24:MI:SS.MS') AS "Timestamp",
            p_versie AS "Versie",
            -- The contract version (crates/core/src/contract/mod.rs, CONTRACT_VERSIE): a
            -- worker that knows an older one refuses it as the environment's fault.
            2 AS "ContractVersie"),
        xmlelement(name "Dienstverband", xmlattributes(dv.id AS "Id"),
            xmlelement(name "Cao", xmlattributes(c.id AS "Id"),
                xmlelement(name "Code", c.code),
                xmlelement(name "IsVierWeken", CASE WHEN c.is_vier_weken THEN 1 ELSE 0 END),
                xmlelement(name "Naam", c.naam),
                xmlelement(name "WerkweekUren", c.werkweek_uren)),
            xmlelement(name "DagenPerWeek", dv.dagen_per_week),
            xmlelement(name "DatumInDienst", to_char(dv.datum_in_dienst, 'YYYY-MM-DD')),
            CASE WHEN dv.datum_uit_dienst IS NOT NULL THEN
                xmlelement(name "DatumUitDienst", to_char(dv.datum_uit_dienst, 'YYYY-MM-DD')) END,
            xmlelement(name "ParttimeUren", coalesce(nullif(dv.parttime_uren, 0), c.werkweek_uren)),
            CASE WHEN dv.salaris IS NOT NULL THEN
                xmlelement(name "Salaris",
                    xmlattributes(dv.garantie_toeslag AS "GarantieToeslag",
                                  dv.garantie_trede_bedrag AS "GarantieTredeBedrag",
                                  dv.loon_toeslag AS "LoonToeslag"),
                    xmlelement(name "NominaalSalaris", dv.salaris)) END,
            xmlelement(name "Soort", dv.soort),
            xmlelement(name "Functiegroep", dv.functiegroep)),
        xmlelement(name "Periode", xmlattributes(p.id AS "Id"),
            xmlelement(name "Begin", to_char(p.begin_datum, 'YYYY-MM-DD')),
            xmlelement(name "Einde", to_char(p.eind_datum, 'YYYY-MM-DD'))),
        xmlelement(name "Diensten",
            (SELECT xmlagg(xmlelement(name "Dienst", xmlattributes(to_char(d.datum, 'YYYY-MM-DD') AS "Datum"),
                        (SELECT xmlagg(xmlelement(name "Tijdblok",
                                    xmlattributes(to_char(t.begin_tijd, 'HH24:MI') AS "Begin",
                                                  to_char(t.eind_tijd, 'HH24:MI') AS "Einde",
                                                  CASE WHEN t.is_ziek THEN 1 ELSE 0 END AS "IsZiek",
                                                  t.verlof AS "Verlof"),
                                    xmlelement(name "DienstType",
                                        xmlattributes(dt.code AS "Code",
                                            CASE WHEN dt.telt_mee_in_gewerkte_uren THEN 1 ELSE 0 END
                                                AS "TeltMeeInGewerkteUren")))
                                ORDER BY t.begin_tijd, t.id)
                           FROM rooster.tijdblok t JOIN rooster.dienst_type dt ON dt.code = t.dienst_type
                          WHERE t.dienst_id = d.id))
                    ORDER BY d.datum, d.id)
               FROM rooster.dienst d
              WHERE d.dienstverband_id = dv.id AND d.datum BETWEEN p.begin_datum AND p.eind_datum
                AND EXISTS (SELECT 1 FROM rooster.tijdblok t WHERE t.dienst_id = d.id))),
        -- The stored results of the periods that begin in the 12 months before this one
        -- (the CAO's averages look back at most that far: ORT over vacation six months,
        -- its maximum the calendar year); no element when there are none.
        (SELECT xmlelement(name "Historie",
                    xmlagg(xmlelement(name "Periode",
                               xmlattributes(hp.id AS "Id", to_char(hp.begin_datum, 'YYYY-MM-DD') AS "Begin",
                                             to_char(hp.eind_datum, 'YYYY-MM-DD') AS "Einde"),
                               (SELECT xmlagg(xmlelement(name "Factor",
                                           xmlattributes(f.loonfactor_code AS "Code", f.waarde AS "Waarde"))
                                           ORDER BY f.loonfactor_code)
                                  FROM rekenserver.resultaat_factor f
                                 WHERE f.dienstverband_id = dv.id AND f.periode_id = hp.id))
                           ORDER BY hp.begin_datum, hp.id))
           FROM rooster.periode hp
          WHERE hp.is_vier_weken = c.is_vier_weken
            AND hp.begin_datum >= p.begin_datum - interval '12 months' AND hp.eind_datum < p.begin_datum
            AND EXISTS (SELECT 1 FROM rekenserver.resultaat r
                         WHERE r.dienstverband_id = dv.id AND r.periode_id = hp.id)
         HAVING count(*) > 0))
      FROM rooster.dienstverband dv
      JOIN rooster.cao c ON c.id = dv.cao_id
      JOIN rooster.periode p ON p.id = p_periode
     WHERE dv.id = p_dv);
END $$;

-- Sends the Vraag of one key at its current roster version, in the key's group, with
-- the configured LIFETIME (rekenserver.instelling), and logs it. Returns the initiator's
-- dialog handle; NULL when nothing was sent: no such key, or its Vraag cannot be built
-- (then recorded in rekenserver.onverzendbaar with the reason).
-- Used by the commit trigger (after raising the version) and by the sweep.
DROP FUNCTION IF EXISTS rekenserver.stuur_vraag(int, int);
CREATE OR REPLACE FUNCTION rekenserver.stuur_vraag(p_dv int, p_periode int, p_herberekening boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    v_versie bigint;
    v_group  uuid;
    v_id     uuid := gen_random_uuid();
    v_vraag  xml;
    v_tekst  text;
    v_handle uuid;
    v_reuse  uuid;
    v_idle   int;
    v_life   int;
    v_verzonden boolean := false;
    v_schoon boolean;
BEGIN
    SELECT versie, group_id, dialog_handle INTO v_versie, v_group, v_reuse FROM rekenserver.sleutel
     WHERE dienstverband_id = p_dv AND periode_id = p_periode FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    -- Both settings in one look (rekenserver.dialoog_hergebruik, rekenserver.dialog_levensduur).
    SELECT coalesce(max(waarde) FILTER (WHERE naam = 'dialog_reuse_idle_seconds'), 0),
           coalesce(max(waarde) FILTER (WHERE naam = 'dialog_lifetime_seconds'), 604800)
      INTO v_idle, v_life FROM rekenserver.instelling;
    v_vraag := rekenserver.vraag(p_dv, p_periode, v_versie, v_id);
    IF v_vraag IS NULL THEN
        INSERT INTO rekenserver.onverzendbaar AS o (dienstverband_id, periode_id, versie, reden)
        VALUES (p_dv, p_periode, v_versie,
                CASE WHEN NOT EXISTS (SELECT 1 FROM rooster.dienstverband WHERE id = p_dv)
                         THEN format('dienstverband %s does not exist', p_dv)
                     WHEN NOT EXISTS (SELECT 1 FROM rooster.periode WHERE id = p_periode)
                         THEN format('periode %s does not exist', p_periode)
                     ELSE format('the CAO of dienstverband %s does not exist', p_dv) END)
        ON CONFLICT (dienstverband_id, periode_id) DO UPDATE
            SET versie = EXCLUDED.versie, reden = EXCLUDED.reden, sinds = clock_timestamp();
        RETURN NULL;
    END IF;
    -- The text once: sent as UTF-8, and kept in the log for the evidence. Built by
    -- xmlelement, it is well-formed unless a roster text brought a character XML
    -- forbids (xmlelement passes control characters through): only then is it parsed
    -- again at SEND, and refused there (sb.send_as).
    v_tekst := v_vraag::text;
    v_schoon := v_tekst !~ E'[\\x01-\\x08\\x0B\\x0C\\x0E-\\x1F\\uFFFE\\uFFFF]';
    IF p_herberekening OR p_dv < 0 OR v_idle = 0 THEN
        -- A dialog per request. A recompute's Vraag goes on its own contract, at its
        -- lower priority; the self-test's scratch key (negative ids) is not reused.
        v_handle := sb.begin_dialog('/Rekenserver/LoonfactorBerekening/DataService',
                                    '/Rekenserver/LoonfactorBerekening/RekenService',
                                    CASE WHEN p_herberekening THEN '/Rekenserver/LoonfactorBerekening/HerberekenContract'
                                         ELSE '/Rekenserver/LoonfactorBerekening/DataContract' END, v_group, v_life);
    ELSE
        -- Conversation reuse: the key's dialog, while neither side has ended it, it is not
        -- near its LIFETIME's end, and the calculation side does not hold its group (a
        -- send into a held group would wait for the calculation's transaction: a new
        -- dialog is taken instead). Messages on one dialog arrive in order. Checked and
        -- sent in one pass (sb.send_if_ready).
        IF v_reuse IS NOT NULL
           AND sb.send_if_ready(v_reuse, '/Rekenserver/LoonfactorBerekening/Vraag', convert_to(v_tekst, 'UTF8'),
                                '/Rekenserver/LoonfactorBerekening/SleutelContract',
                                clock_timestamp() + make_interval(secs => least(600, v_life / 2)), v_schoon) THEN
            v_handle := v_reuse;
            v_verzonden := true;
        END IF;
    END IF;
    IF v_handle IS NULL THEN
        v_handle := sb.begin_dialog('/Rekenserver/LoonfactorBerekening/DataService',
                                    '/Rekenserver/LoonfactorBerekening/RekenService',
                                    '/Rekenserver/LoonfactorBerekening/SleutelContract', v_group, v_life);
        UPDATE rekenserver.sleutel SET dialog_handle = v_handle
         WHERE dienstverband_id = p_dv AND periode_id = p_periode;
    END IF;
    IF NOT v_verzonden THEN
        PERFORM sb.send_as(v_handle, '/Rekenserver/LoonfactorBerekening/Vraag', convert_to(v_tekst, 'UTF8'),
                           v_schoon);
    END IF;
    INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
    VALUES (v_handle, v_id, p_dv, p_periode, v_versie, v_tekst);
    DELETE FROM rekenserver.onverzendbaar WHERE dienstverband_id = p_dv AND periode_id = p_periode;
    RETURN v_handle;
END $$;

-- A committed change to one key: raises its version and sends its Vraag, unless
-- sending is switched off for a bulk import (`SET rekenserver.vragen_uit = on`: the
-- version still rises, and the sweep sends the key later).
DROP FUNCTION IF EXISTS rekenserver.verstuur_vraag(int, int);
CREATE OR REPLACE FUNCTION rekenserver.verstuur_vraag(p_dv int, p_periode int, p_herberekening boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.sleutel AS s (dienstverband_id, periode_id, versie, group_id)
    VALUES (p_dv, p_periode, 1, gen_random_uuid())
    ON CONFLICT (dienstverband_id, periode_id)
    DO UPDATE SET versie = s.versie + 1, gewijzigd_op = clock_timestamp();
    IF coalesce(current_setting('rekenserver.vragen_uit', true), '') IN ('on', 'true', '1') THEN
        RETURN NULL;
    END IF;
    -- stuur_vraag reads the roster in statements of its own, so a transaction that
    -- waited for the key's row above sees what the one before it committed.
    RETURN rekenserver.stuur_vraag(p_dv, p_periode, p_herberekening);
END $$;

-- Keys the triggers never saw: a change made with the roster's triggers off
-- (session_replication_role = replica, ALTER TABLE ... DISABLE TRIGGER) raises no
-- version. This raises the version of every key of the employees p_dv_van..p_dv_tot in
-- the dates p_datum_van..p_datum_tot, both the keys of the roster's duties there and the
-- keys known before whose period overlaps the dates (their duties may be gone), and
-- sends nothing: `sbworker sweep` sends them. Returns how many keys it raised.
-- Planners first: a key a planner's transaction holds for more than 200 ms makes this
-- fail (55P03, lock_not_available) instead of waiting, so in a deadlock with a planner's
-- commit this is the one that gives way (see rekenserver.herbereken); run it again.
--   SELECT rekenserver.markeer_sleutels(1, 2147483647, DATE '2026-01-01', DATE '2026-12-31');
CREATE OR REPLACE FUNCTION rekenserver.markeer_sleutels(p_dv_van int, p_dv_tot int, p_datum_van date, p_datum_tot date)
RETURNS int LANGUAGE plpgsql SET lock_timeout = '200ms' AS $$
DECLARE
    v_n int;
BEGIN
    IF p_dv_van IS NULL OR p_dv_tot IS NULL OR p_datum_van IS NULL OR p_datum_tot IS NULL
       OR p_dv_van > p_dv_tot OR p_datum_van > p_datum_tot THEN
        PERFORM sb.fail('22023', 'markeer_sleutels needs two ranges, each from its lower to its upper bound');
    END IF;
    INSERT INTO rekenserver.sleutel AS s (dienstverband_id, periode_id, versie, group_id)
    SELECT k.dv, k.p, 1, gen_random_uuid()
      FROM (SELECT d.dienstverband_id AS dv, p.id AS p
              FROM rooster.dienst d
             CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
             WHERE d.dienstverband_id BETWEEN p_dv_van AND p_dv_tot AND d.datum BETWEEN p_datum_van AND p_datum_tot
            UNION
            SELECT s.dienstverband_id, s.periode_id
              FROM rekenserver.sleutel s JOIN rooster.periode p ON p.id = s.periode_id
             WHERE s.dienstverband_id BETWEEN p_dv_van AND p_dv_tot
               AND p.begin_datum <= p_datum_tot AND p.eind_datum >= p_datum_van) k
     ORDER BY k.dv, k.p
    ON CONFLICT (dienstverband_id, periode_id) DO UPDATE SET versie = s.versie + 1, gewijzigd_op = clock_timestamp();
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- Recompute (`sbworker recompute`): the known keys that match every filter given (NULL:
-- no filter), in key order after the key (p_na_dv, p_na_periode), at most p_aantal.
-- For a change no roster edit makes: new rate tables, a CAO change, a corrected period.
DROP FUNCTION IF EXISTS rekenserver.herbereken_sleutels(int[], text, int, int, int, int, int);
CREATE OR REPLACE FUNCTION rekenserver.herbereken_sleutels(
    p_periodes int[], p_cao text, p_dv_van int, p_dv_tot int, p_na_dv int, p_na_periode int, p_aantal int,
    p_dvs int[] DEFAULT NULL, p_pers int[] DEFAULT NULL)
RETURNS TABLE (dienstverband_id int, periode_id int) LANGUAGE plpgsql STABLE AS $$
BEGIN
    -- The lower bound is always a value, so that the key comparison stays an index
    -- condition in a generic plan too (a page never walks the keys before it).
    RETURN QUERY
    SELECT s.dienstverband_id, s.periode_id
      FROM rekenserver.sleutel s
      JOIN rooster.dienstverband dv ON dv.id = s.dienstverband_id
      JOIN rooster.cao c ON c.id = dv.cao_id
     WHERE (s.dienstverband_id, s.periode_id)
               > (coalesce(p_na_dv, -2147483648), coalesce(p_na_periode, -2147483648))
       AND (p_periodes IS NULL OR s.periode_id = ANY (p_periodes))
       AND (p_cao IS NULL OR c.code = p_cao)
       AND (p_dv_van IS NULL OR s.dienstverband_id >= p_dv_van)
       AND (p_dv_tot IS NULL OR s.dienstverband_id <= p_dv_tot)
       AND (p_dvs IS NULL OR (s.dienstverband_id, s.periode_id) IN (SELECT * FROM unnest(p_dvs, p_pers)))
     ORDER BY s.dienstverband_id, s.periode_id
     LIMIT p_aantal;
END $$;

-- Recomputes these keys ($1 dienstverbanden, $2 periods, pairwise) as a roster edit
-- does: each key's version rises and its Vraag, built from the data as it stands now,
-- is sent, in key order (a planner's commit may lock keys in another order: a deadlock
-- between them costs one of the two its transaction). Returns how many were sent (a key
-- whose Vraag cannot be built is recorded in rekenserver.onverzendbaar).
-- Planners first, in a deadlock too: PostgreSQL has no deadlock priority (the session
-- whose deadlock_timeout, 1 s by default, runs out first while it waits is the victim,
-- often the planner's). So this gives up any lock wait after 200 ms (55P03,
-- lock_not_available), well within a planner's deadlock_timeout: in a deadlock it is this
-- batch that rolls back, and `sbworker recompute` takes it again after a pause. (A
-- planner whose deadlock check runs within 200 ms of this batch starting to wait still
-- loses: the window SQL Server's DEADLOCK_PRIORITY LOW closes, which this cannot.)
CREATE OR REPLACE FUNCTION rekenserver.herbereken(p_dvs int[], p_periodes int[])
RETURNS int LANGUAGE plpgsql SET lock_timeout = '200ms' AS $$
DECLARE
    k record;
    v_n int := 0;
BEGIN
    FOR k IN SELECT u.dv, u.p FROM unnest(p_dvs, p_periodes) AS u(dv, p) ORDER BY u.dv, u.p LOOP
        IF rekenserver.verstuur_vraag(k.dv, k.p, true) IS NOT NULL THEN
            v_n := v_n + 1;
        END IF;
    END LOOP;
    RETURN v_n;
END $$;

-- The evidence of a key's stored versions (`sbworker explain`): each version's Vraag as
-- sent and its factors, oldest first.
-- (Dropped first only when its result is not this one: CREATE OR REPLACE cannot change
-- it, and a drop at every install would give it a new identity each time.)
DO $$
BEGIN
    IF pg_catalog.pg_get_function_result(pg_catalog.to_regprocedure('rekenserver.bewijs(int, int)'))
       IS DISTINCT FROM 'TABLE(versie bigint, opgeslagen_op timestamp with time zone, vraag text, factoren jsonb, '
                        'rekenversie text, geexporteerd_op timestamp with time zone)' THEN
        DROP FUNCTION IF EXISTS rekenserver.bewijs(int, int);
    END IF;
END $$;
CREATE OR REPLACE FUNCTION rekenserver.bewijs(p_dv int, p_periode int)
RETURNS TABLE (versie bigint, opgeslagen_op timestamptz, vraag text, factoren jsonb, rekenversie text,
               geexporteerd_op timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT h.versie, h.opgeslagen_op, h.vraag, h.factoren, h.rekenversie, h.geexporteerd_op
      FROM rekenserver.resultaat_historie h
     WHERE h.dienstverband_id = p_dv AND h.periode_id = p_periode
     ORDER BY h.versie, h.id;
END $$;

-- The keys a search picks, for the web page (`sbworker web`, /sleutels): in key order,
-- after (p_na_dv, p_na_periode), at most p_aantal, each with its CAO, its roster version,
-- its stored result and export, and the Fout that answered its current version if no
-- result of that version was stored after it (a replay, a sweep). A NULL filter picks
-- all: p_dv, p_periode, p_cao (its code), p_staat ('opgeslagen': the result is of the
-- current version; 'wacht': the roster is newer and no Fout answered it; 'fout': the
-- current version was answered with a Fout), p_reden (a text that Fout holds, in any
-- case). Keys are read in the order of their primary key, each key's Fout through the
-- log's index of Fouts (berekening_log_fout, 003_calculation.sql); a search for keys in
-- Fout is driven by that index, so only keys with a Fout are read.
CREATE OR REPLACE FUNCTION rekenserver.sleutels_zoek(p_dv int, p_periode int, p_cao text, p_staat text,
    p_reden text, p_na_dv int, p_na_periode int, p_aantal int)
RETURNS TABLE (dienstverband_id int, periode_id int, cao text, versie bigint, gewijzigd_op timestamptz,
               opgeslagen_versie bigint, opgeslagen_op timestamptz, export_status int, fout text)
LANGUAGE plpgsql STABLE SET jit = off AS $$
BEGIN
    -- EXECUTE: planned for each call's own filters (a NULL filter drops out; a cached
    -- generic plan would read every key to sort them). A text in the Fout picks keys in
    -- Fout only, which are neither stored nor waiting.
    IF p_reden IS NOT NULL AND p_staat IN ('opgeslagen', 'wacht') THEN
        RETURN;
    END IF;
    IF p_staat = 'fout' OR p_reden IS NOT NULL THEN
        RETURN QUERY EXECUTE $q$
        SELECT s.dienstverband_id, s.periode_id, c.code, s.versie, s.gewijzigd_op, r.versie, r.opgeslagen_op,
               r.export_status::int, f.foutmelding
          FROM (SELECT DISTINCT l.dienstverband_id, l.periode_id FROM rekenserver.berekening_log l
                 WHERE l.uitkomst = 'fout'
                   AND ($1 IS NULL OR l.dienstverband_id = $1)
                   AND ($6 IS NULL OR (l.dienstverband_id, l.periode_id) > ($6, $7))) k
          JOIN rekenserver.sleutel s ON s.dienstverband_id = k.dienstverband_id AND s.periode_id = k.periode_id
          LEFT JOIN rooster.dienstverband dv ON dv.id = s.dienstverband_id
          LEFT JOIN rooster.cao c ON c.id = dv.cao_id
          LEFT JOIN rekenserver.resultaat r ON r.dienstverband_id = s.dienstverband_id AND r.periode_id = s.periode_id
          JOIN LATERAL (SELECT l.foutmelding FROM rekenserver.berekening_log l
                         WHERE l.uitkomst = 'fout' AND l.dienstverband_id = s.dienstverband_id
                           AND l.periode_id = s.periode_id AND l.versie = s.versie
                         ORDER BY l.beantwoord_op DESC LIMIT 1) f ON coalesce(r.versie, 0) < s.versie
         WHERE f.foutmelding IS NOT NULL
           AND ($2 IS NULL OR s.periode_id = $2)
           AND ($3 IS NULL OR c.code = $3)
           AND ($5 IS NULL OR strpos(lower(f.foutmelding), lower($5)) > 0)
         ORDER BY k.dienstverband_id, k.periode_id
         LIMIT $8$q$
        USING p_dv, p_periode, p_cao, p_staat, p_reden, p_na_dv, p_na_periode, p_aantal;
        RETURN;
    END IF;
    RETURN QUERY EXECUTE $q$
    SELECT s.dienstverband_id, s.periode_id, c.code, s.versie, s.gewijzigd_op, r.versie, r.opgeslagen_op,
           r.export_status::int, f.foutmelding
      FROM rekenserver.sleutel s
      LEFT JOIN rooster.dienstverband dv ON dv.id = s.dienstverband_id
      LEFT JOIN rooster.cao c ON c.id = dv.cao_id
      LEFT JOIN rekenserver.resultaat r ON r.dienstverband_id = s.dienstverband_id AND r.periode_id = s.periode_id
      LEFT JOIN LATERAL (SELECT l.foutmelding FROM rekenserver.berekening_log l
                          WHERE l.uitkomst = 'fout' AND l.dienstverband_id = s.dienstverband_id
                            AND l.periode_id = s.periode_id AND l.versie = s.versie
                          ORDER BY l.beantwoord_op DESC LIMIT 1) f ON coalesce(r.versie, 0) < s.versie
     WHERE ($1 IS NULL OR s.dienstverband_id = $1)
       AND ($2 IS NULL OR s.periode_id = $2)
       AND ($3 IS NULL OR c.code = $3)
       AND ($4 IS NULL
            OR ($4 = 'opgeslagen' AND r.versie = s.versie)
            OR ($4 = 'wacht' AND s.versie > coalesce(r.versie, 0) AND f.foutmelding IS NULL))
       AND ($6 IS NULL OR (s.dienstverband_id, s.periode_id) > ($6, $7))
     ORDER BY s.dienstverband_id, s.periode_id
     LIMIT $8$q$
    USING p_dv, p_periode, p_cao, p_staat, p_reden, p_na_dv, p_na_periode, p_aantal;
END $$;

-- Every Vraag sent for a key that the calculation log still holds (the sweep's
-- retention keeps it bounded), oldest first, with its outcome. No index of the log leads
-- with the key but the one of requests in flight: one on every row would cost each
-- request sent and answered, for a page an operator opens now and then (the log is read
-- whole for one key; docs/operations.md gives the time at size).
CREATE OR REPLACE FUNCTION rekenserver.sleutel_tijdlijn(p_dv int, p_periode int)
RETURNS TABLE (versie bigint, verzonden_op timestamptz, beantwoord_op timestamptz, uitkomst text, foutmelding text)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT l.versie, l.verzonden_op, l.beantwoord_op, l.uitkomst, l.foutmelding
      FROM rekenserver.berekening_log l
     WHERE l.dienstverband_id = p_dv AND l.periode_id = p_periode
     ORDER BY l.verzonden_op, l.versie
$$;

-- TRUNCATE fires no DELETE trigger: a TRUNCATE of the duties or their blocks raises the
-- version of every key known (in rekenserver.sleutel), to be sent by the sweep.
CREATE OR REPLACE FUNCTION rooster.noteer_truncate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rekenserver.sleutel SET versie = versie + 1, gewijzigd_op = clock_timestamp();
    RETURN NULL;
END $$;

-- The deferred trigger: at COMMIT, once per key the transaction touched. One statement
-- drops the note and sends (a trigger fired at COMMIT runs its statements as top-level
-- ones: each is a statement of the planner's commit). The note's DELETE, not referenced,
-- runs to completion whatever the send returns; rekenserver.verstuur_vraag does not
-- read the notes.
CREATE OR REPLACE FUNCTION rekenserver.bij_commit() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    v_vraag uuid;
BEGIN
    WITH weg AS (
        DELETE FROM rekenserver.te_berekenen
         WHERE xid = NEW.xid AND dienstverband_id = NEW.dienstverband_id AND periode_id = NEW.periode_id
    )
    SELECT rekenserver.verstuur_vraag(NEW.dienstverband_id, NEW.periode_id) INTO v_vraag;
    RETURN NULL;
END $$;

-- Statement triggers: note the keys a statement touched (old and new rows).
CREATE OR REPLACE FUNCTION rooster.noteer_dienst() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id
      FROM (SELECT dienstverband_id, datum FROM nieuw UNION SELECT dienstverband_id, datum FROM oud) d
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rooster.noteer_tijdblok() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id
      FROM (SELECT dienst_id FROM nieuw UNION SELECT dienst_id FROM oud) t
      JOIN rooster.dienst d ON d.id = t.dienst_id
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- A change to the employment (salary, hours, ...) touches every period it has duties in.
CREATE OR REPLACE FUNCTION rooster.noteer_dienstverband() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id
      FROM nieuw n
      JOIN rooster.dienst d ON d.dienstverband_id = n.id
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- INSERT and DELETE have one transition table; these wrappers give the other as empty.
CREATE OR REPLACE FUNCTION rooster.noteer_dienst_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id FROM nieuw d
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rooster.noteer_dienst_del() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id FROM oud d
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rooster.noteer_tijdblok_ins() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id
      FROM (SELECT DISTINCT dienst_id FROM nieuw) t JOIN rooster.dienst d ON d.id = t.dienst_id
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION rooster.noteer_tijdblok_del() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- Blocks deleted with their Dienst find no Dienst here; the Dienst's trigger notes them.
    INSERT INTO rekenserver.te_berekenen (dienstverband_id, periode_id)
    SELECT DISTINCT d.dienstverband_id, p.id
      FROM (SELECT DISTINCT dienst_id FROM oud) t JOIN rooster.dienst d ON d.id = t.dienst_id
     CROSS JOIN LATERAL rooster.perioden(d.dienstverband_id, d.datum) AS p(id)
    ON CONFLICT DO NOTHING;
    RETURN NULL;
END $$;

-- The triggers, each dropped and made again only when it is missing or not the one
-- below: written as pg_get_triggerdef gives it back (every schema named), so that a
-- current trigger compares equal and its table is not locked against the planners.
DO $$
DECLARE
    v_def  text;
    v_name text;
    v_on   text;
    v_path text := pg_catalog.current_setting('search_path');
BEGIN
    -- pg_get_triggerdef leaves out a schema on the search_path: none is, while it compares.
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog', true);
    FOREACH v_def IN ARRAY ARRAY[
        -- The deferred trigger: at COMMIT, once per key the transaction touched.
        'CREATE CONSTRAINT TRIGGER verstuur_bij_commit AFTER INSERT ON rekenserver.te_berekenen '
            'DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION rekenserver.bij_commit()',
        -- One trigger per event, each reading the transition tables its event has.
        'CREATE TRIGGER noteer_ins AFTER INSERT ON rooster.dienst REFERENCING NEW TABLE AS nieuw '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_dienst_ins()',
        'CREATE TRIGGER noteer_upd AFTER UPDATE ON rooster.dienst REFERENCING OLD TABLE AS oud NEW TABLE AS nieuw '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_dienst()',
        'CREATE TRIGGER noteer_del AFTER DELETE ON rooster.dienst REFERENCING OLD TABLE AS oud '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_dienst_del()',
        'CREATE TRIGGER noteer_ins AFTER INSERT ON rooster.tijdblok REFERENCING NEW TABLE AS nieuw '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_tijdblok_ins()',
        'CREATE TRIGGER noteer_upd AFTER UPDATE ON rooster.tijdblok REFERENCING OLD TABLE AS oud NEW TABLE AS nieuw '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_tijdblok()',
        'CREATE TRIGGER noteer_del AFTER DELETE ON rooster.tijdblok REFERENCING OLD TABLE AS oud '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_tijdblok_del()',
        'CREATE TRIGGER noteer_upd AFTER UPDATE ON rooster.dienstverband REFERENCING NEW TABLE AS nieuw '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_dienstverband()',
        'CREATE TRIGGER noteer_truncate AFTER TRUNCATE ON rooster.dienst '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_truncate()',
        'CREATE TRIGGER noteer_truncate AFTER TRUNCATE ON rooster.tijdblok '
            'FOR EACH STATEMENT EXECUTE FUNCTION rooster.noteer_truncate()'
    ] LOOP
        v_name := pg_catalog.substring(v_def, 'TRIGGER (\w+) ');
        v_on := pg_catalog.substring(v_def, ' ON (\S+) ');
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                        WHERE t.tgrelid = v_on::regclass AND t.tgname = v_name
                          AND pg_catalog.pg_get_triggerdef(t.oid) = v_def) THEN
            EXECUTE format('DROP TRIGGER IF EXISTS %I ON %s', v_name, v_on);
            EXECUTE v_def;
        END IF;
    END LOOP;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END $$;

INSERT INTO sb.migration (version) VALUES (4) ON CONFLICT DO NOTHING;

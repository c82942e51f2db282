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
SELECT sb.create_queue('loonfactorberekening_data') WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'loonfactorberekening_data');
SELECT sb.create_queue('loonfactorberekening_reken') WHERE NOT EXISTS (SELECT 1 FROM sb.queue WHERE name = 'loonfactorberekening_reken');
-- sbworker's own attempt accounting is the poison rule on the queues it serves: the
-- broker's (a queue disabled after 5 rolled-back receives in a row) would count
-- deadlocks and dropped connections too. See docs/retries.md.
SELECT sb.alter_queue(q, p_poison_handling => false)
  FROM unnest(ARRAY['loonfactorberekening_data', 'loonfactorberekening_reken']) AS q;
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/DataService', 'loonfactorberekening_data');
SELECT sb.create_service('/Rekenserver/LoonfactorBerekening/RekenService', 'loonfactorberekening_reken',
                         ARRAY['/Rekenserver/LoonfactorBerekening/DataContract']);

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
CREATE INDEX IF NOT EXISTS resultaat_export ON rekenserver.resultaat (periode_id, export_status);
CREATE INDEX IF NOT EXISTS resultaat_batch ON rekenserver.resultaat (export_batch) WHERE export_batch IS NOT NULL;

CREATE TABLE IF NOT EXISTS rekenserver.resultaat_factor (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    kaart_soort      int NOT NULL,
    loonfactor_code  text NOT NULL,
    waarde           numeric(18,4) NOT NULL,
    PRIMARY KEY (dienstverband_id, periode_id, loonfactor_code),
    FOREIGN KEY (dienstverband_id, periode_id) REFERENCES rekenserver.resultaat ON DELETE CASCADE
);

-- Every version ever stored, in the order it was stored (for audits and the tests: a
-- key's versions here only grow).
CREATE TABLE IF NOT EXISTS rekenserver.resultaat_historie (
    id               bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    opgeslagen_op    timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS resultaat_historie_key ON rekenserver.resultaat_historie (dienstverband_id, periode_id, id);

-- One row per Vraag sent (the original system's LoonfactorBerekeningLog): written by the sender,
-- completed by the collector with the outcome (opgeslagen: stored; verouderd: an answer
-- older than the stored result; vervangen: answered as superseded by the calculation;
-- fout: a Fout or an error end, with the reason).
CREATE TABLE IF NOT EXISTS rekenserver.berekening_log (
    dialog_handle    uuid PRIMARY KEY,
    vraag_id         uuid NOT NULL,
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    versie           bigint NOT NULL,
    verzonden_op     timestamptz NOT NULL DEFAULT clock_timestamp(),
    beantwoord_op    timestamptz,
    uitkomst         text CHECK (uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')),
    foutmelding      text
);
CREATE INDEX IF NOT EXISTS berekening_log_open ON rekenserver.berekening_log (dienstverband_id, periode_id)
    WHERE uitkomst IS NULL;

-- Stores an Antwoord: replaces the key's factors when its version is newer than the
-- stored one (never otherwise, so a stored result never goes back), logs the version,
-- and completes the calculation log. Returns the outcome.
CREATE OR REPLACE FUNCTION rekenserver.sla_antwoord_op(p_handle uuid, p_vraag_id uuid, p_dv int, p_periode int,
    p_versie bigint, p_vervangen boolean, p_kaart_soorten int[], p_codes text[], p_waarden numeric[])
RETURNS text LANGUAGE plpgsql AS $$
DECLARE
    v_uitkomst text := 'vervangen';
BEGIN
    IF NOT p_vervangen THEN
        INSERT INTO rekenserver.resultaat AS r (dienstverband_id, periode_id, versie, vraag_id, dialog_handle)
        VALUES (p_dv, p_periode, p_versie, p_vraag_id, p_handle)
        ON CONFLICT (dienstverband_id, periode_id) DO UPDATE
            SET versie = EXCLUDED.versie, vraag_id = EXCLUDED.vraag_id, dialog_handle = EXCLUDED.dialog_handle,
                opgeslagen_op = clock_timestamp(),
                export_status = 0, export_batch = NULL, geclaimd_op = NULL, geexporteerd_op = NULL
            WHERE r.versie < EXCLUDED.versie;
        IF FOUND THEN
            v_uitkomst := 'opgeslagen';
            DELETE FROM rekenserver.resultaat_factor WHERE dienstverband_id = p_dv AND periode_id = p_periode;
            INSERT INTO rekenserver.resultaat_factor (dienstverband_id, periode_id, kaart_soort, loonfactor_code, waarde)
            SELECT p_dv, p_periode, k, c, w FROM unnest(p_kaart_soorten, p_codes, p_waarden) AS u(k, c, w);
            INSERT INTO rekenserver.resultaat_historie (dienstverband_id, periode_id, versie)
            VALUES (p_dv, p_periode, p_versie);
        ELSE
            v_uitkomst := 'verouderd';
        END IF;
    END IF;
    UPDATE rekenserver.berekening_log SET beantwoord_op = clock_timestamp(), uitkomst = v_uitkomst
     WHERE dialog_handle = p_handle;
    RETURN v_uitkomst;
END $$;

-- Records a Fout (or an error end without one) for the dialog.
CREATE OR REPLACE FUNCTION rekenserver.noteer_fout(p_handle uuid, p_melding text)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE rekenserver.berekening_log
       SET beantwoord_op = coalesce(beantwoord_op, clock_timestamp()), uitkomst = 'fout',
           foutmelding = coalesce(foutmelding, p_melding)
     WHERE dialog_handle = p_handle AND (uitkomst IS NULL OR uitkomst = 'fout');
END $$;

INSERT INTO sb.migration (version) VALUES (3) ON CONFLICT DO NOTHING;

-- The pipeline's business limit (`sbworker bench`, the pipeline part): what every queue
-- must do per roster edit, with no queue at all. Installed into a database that has the
-- broker's roster and result schema (the same roster triggers, version keys, Vraag
-- builder, log and latest-wins store), as the River pipeline's database has: this
-- replaces only the step that sends a key's Vraag, as bench_river_pipeline.sql does for
-- River, and sends it nowhere. The Vraag is built by rekenserver.vraag and logged as the
-- roster's own send does; what a message would carry to the store (the log's key, the
-- Vraag's id, the key and its version) is left in a session setting of the planner's
-- connection, where the pgbench script's next statement, the store, takes it
-- (bench_business_limit.pgbench).

-- With the broker's pinned search_path (006_security.sql).
CREATE OR REPLACE FUNCTION rekenserver.stuur_vraag(p_dv int, p_periode int, p_herberekening boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_versie bigint;
    v_id     uuid := gen_random_uuid();
    v_vraag  xml;
    v_tekst  text;
    -- The log's key, as a dialog handle would be; the session setting carries it to the store.
    v_handle uuid := gen_random_uuid();
BEGIN
    SELECT versie INTO v_versie FROM rekenserver.sleutel
     WHERE dienstverband_id = p_dv AND periode_id = p_periode FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    v_vraag := rekenserver.vraag(p_dv, p_periode, v_versie, v_id);
    IF v_vraag IS NULL THEN
        RETURN NULL;
    END IF;
    v_tekst := v_vraag::text;
    INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
    VALUES (v_handle, v_id, p_dv, p_periode, v_versie, v_tekst);
    -- Not local: it outlives the commit that runs this, for the session's next statement.
    PERFORM set_config('bench.vraag', concat_ws(' ', v_handle, v_id, p_dv, p_periode, v_versie), false);
    RETURN v_handle;
END $$;

-- The engine's answer per key, computed once by the bench from the key's first Vraag
-- with the engine the worker runs, and decoded as the collector decodes it: the
-- arguments of rekenserver.sla_antwoord_op; or, for a key the engine answers with a Fout,
-- the reason the collector records (rekenserver.noteer_fout).
CREATE TABLE IF NOT EXISTS bench_antwoord (
    dienstverband_id int NOT NULL,
    periode_id       int NOT NULL,
    kaart_soorten    int[],
    codes            text[],
    waarden          numeric[],
    rekenversie      text,
    waarschuwingen   jsonb,
    fout             text,
    herstelbaar      boolean,
    PRIMARY KEY (dienstverband_id, periode_id)
);

-- The River pipeline (`sbworker bench`, the pipeline part): what a PostgreSQL shop would
-- build with River instead of the broker. Installed into a database that has the
-- broker's roster and result schema (the same roster triggers, version keys, Vraag
-- builder, log and latest-wins store) and River's own tables (its migrations): this
-- replaces only the step that sends a key's Vraag. Instead of a dialog, the Vraag goes
-- into a River job, inserted with River's SQL insert form (the columns River's clients
-- write, state 'available') in the roster's transaction, and River's insert
-- notification wakes its workers at commit. River's workers (bench/river, `pipeline`)
-- run sbworker's engine and store the result with `rekenserver.sla_antwoord_op`, the
-- collector's own latest-wins store, completing the job in the same transaction.

-- With the broker's pinned search_path (006_security.sql): River's tables are named with
-- their schema, public, where River's migrations put them.
CREATE OR REPLACE FUNCTION rekenserver.stuur_vraag(p_dv int, p_periode int, p_herberekening boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_versie bigint;
    v_id     uuid := gen_random_uuid();
    v_vraag  xml;
    v_tekst  text;
    -- The log's key, as a dialog handle would be; the job carries it to the store.
    v_handle uuid := gen_random_uuid();
    v_job    bigint;
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
    INSERT INTO public.river_job (args, kind, max_attempts, priority, queue, state)
    VALUES (jsonb_build_object('h', v_handle, 'v', v_tekst), 'rekenserver_vraag', 3, 1, 'rekenserver', 'available')
    RETURNING id INTO v_job;
    -- River's own client sends at most one insert notification per queue and fetch
    -- cooldown (100 ms by default), since its producers fetch again whenever a job
    -- finishes. A trigger keeps no such clock: it notifies only when no other job of the
    -- queue is waiting (were one waiting, the producers are busy and fetch anyway).
    -- Every notifying commit takes the server's one notification queue lock.
    IF NOT EXISTS (SELECT 1 FROM public.river_job
                    WHERE queue = 'rekenserver' AND state = 'available' AND id <> v_job) THEN
        PERFORM pg_notify('public.river_insert', '{"queue":"rekenserver"}');
    END IF;
    INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
    VALUES (v_handle, v_id, p_dv, p_periode, v_versie, v_tekst);
    RETURN v_handle;
END $$;

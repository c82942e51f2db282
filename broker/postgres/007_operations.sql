-- sbworker PostgreSQL broker, version 7: what an operator needs (`sbworker status`,
-- `sbworker dead-letter`) and the workers' heartbeats.
--
-- Idempotent, like 001. Runs with the broker's scripts, before 006_security.sql (which
-- runs last on every install and grants these functions to their roles).

-- One row per running worker process, written by the worker every few seconds
-- (worker.heartbeat_ms) and deleted when it stops cleanly. A row whose beat is old is a
-- worker that died or lost its database.
CREATE TABLE IF NOT EXISTS sbworker.worker_instance (
    instance   uuid PRIMARY KEY,
    host       text NOT NULL,
    pid        int NOT NULL,
    version    text NOT NULL,
    started_at timestamptz NOT NULL,
    beat_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Per queue: {"queue": {"readers": n, "busy": n}}.
    queues     jsonb NOT NULL DEFAULT '{}'
);
-- (Indexes and columns only when missing: see 001_broker.sql.)
DO $$
DECLARE
    v_has name[] := ARRAY(SELECT attname FROM pg_catalog.pg_attribute
                           WHERE attrelid = 'sbworker.worker_instance'::regclass AND NOT attisdropped);
BEGIN
    -- How often the instance beats (worker.heartbeat_ms): status judges its silence by it.
    IF NOT 'interval_ms' = ANY (v_has) THEN
        ALTER TABLE sbworker.worker_instance ADD COLUMN IF NOT EXISTS interval_ms int NOT NULL DEFAULT 10000;
    END IF;
    -- The Vraag contract version the worker reads (NULL: a release before it was
    -- recorded): `sbworker install` refuses to replace the senders while a live worker
    -- reads an older one (docs/deployment.md, "workers first").
    IF NOT 'contract_versie' = ANY (v_has) THEN
        ALTER TABLE sbworker.worker_instance ADD COLUMN IF NOT EXISTS contract_versie int;
    END IF;
END $$;

-- p_started_unix: when the instance started, seconds since the Unix epoch;
-- p_interval_ms: how often it beats; p_contract_versie: the contract version it reads
-- (an older worker's call without it still resolves).
DROP FUNCTION IF EXISTS sbworker.heartbeat(uuid, text, int, text, bigint, jsonb);
DROP FUNCTION IF EXISTS sbworker.heartbeat(uuid, text, int, text, bigint, jsonb, int);
CREATE OR REPLACE FUNCTION sbworker.heartbeat(p_instance uuid, p_host text, p_pid int, p_version text,
    p_started_unix bigint, p_queues jsonb, p_interval_ms int, p_contract_versie int DEFAULT NULL)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO sbworker.worker_instance (instance, host, pid, version, started_at, beat_at, queues, interval_ms,
                                          contract_versie)
    VALUES (p_instance, p_host, p_pid, p_version, to_timestamp(p_started_unix), clock_timestamp(), p_queues,
            p_interval_ms, p_contract_versie)
    ON CONFLICT (instance) DO UPDATE
        SET beat_at = excluded.beat_at, queues = excluded.queues, interval_ms = excluded.interval_ms,
            contract_versie = excluded.contract_versie;
    -- Instances silent for a day are gone for good.
    DELETE FROM sbworker.worker_instance WHERE beat_at < clock_timestamp() - interval '1 day';
END $$;

CREATE OR REPLACE FUNCTION sbworker.heartbeat_end(p_instance uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM sbworker.worker_instance WHERE instance = p_instance;
END $$;

-- Dead letters: where the message came from (to send it again), and its replays.
DO $$
DECLARE
    v_has name[] := ARRAY(SELECT attname FROM pg_catalog.pg_attribute
                           WHERE attrelid = 'sbworker.dead_letter'::regclass AND NOT attisdropped);
BEGIN
    IF NOT 'far_service' = ANY (v_has) THEN
        ALTER TABLE sbworker.dead_letter ADD COLUMN IF NOT EXISTS far_service text;
    END IF;
    IF NOT 'replays' = ANY (v_has) THEN
        ALTER TABLE sbworker.dead_letter ADD COLUMN IF NOT EXISTS replays int NOT NULL DEFAULT 0;
    END IF;
    IF NOT 'replayed_at' = ANY (v_has) THEN
        ALTER TABLE sbworker.dead_letter ADD COLUMN IF NOT EXISTS replayed_at timestamptz;
    END IF;
    IF NOT 'replayed_by' = ANY (v_has) THEN
        ALTER TABLE sbworker.dead_letter ADD COLUMN IF NOT EXISTS replayed_by text;
    END IF;
    IF NOT 'replay_handle' = ANY (v_has) THEN
        ALTER TABLE sbworker.dead_letter ADD COLUMN IF NOT EXISTS replay_handle uuid;
    END IF;
END $$;

-- The service that sent a diverted message, filled from its conversation while that
-- still exists (the worker diverts inside the receiving transaction).
-- Always from the endpoint, whatever the inserting session gave: the sender a replay
-- begins its dialog from is the one the conversation really had (NULL when the
-- conversation is gone).
CREATE OR REPLACE FUNCTION sbworker.dead_letter_far_service() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    NEW.far_service := (SELECT far_service FROM sb.endpoint WHERE handle = NEW.conversation_handle);
    RETURN NEW;
END $$;
-- Dropped and made again only when it is not this one (written as pg_get_triggerdef gives
-- it back): that locks the table the workers divert into.
DO $$
DECLARE
    v_def  text := 'CREATE TRIGGER far_service BEFORE INSERT ON sbworker.dead_letter '
                       'FOR EACH ROW EXECUTE FUNCTION sbworker.dead_letter_far_service()';
    v_path text := pg_catalog.current_setting('search_path');
BEGIN
    -- pg_get_triggerdef leaves out a schema on the search_path: none is, while it compares.
    PERFORM pg_catalog.set_config('search_path', 'pg_catalog', true);
    IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_trigger t
                    WHERE t.tgrelid = 'sbworker.dead_letter'::regclass AND t.tgname = 'far_service'
                      AND pg_catalog.pg_get_triggerdef(t.oid) = v_def) THEN
        DROP TRIGGER IF EXISTS far_service ON sbworker.dead_letter;
        EXECUTE v_def;
    END IF;
    PERFORM pg_catalog.set_config('search_path', v_path, true);
END $$;

-- The dead letters, newest first, with their bodies (the caller reads the key from
-- them): those diverted at or after p_since, at most p_limit.
CREATE OR REPLACE FUNCTION sbworker.dead_letters(p_since timestamptz, p_limit int)
RETURNS TABLE (id bigint, queue text, service_name text, far_service text, message_type_name text,
               message_body bytea, attempts int, reason text, dead_lettered_at timestamptz, replays int,
               replayed_at timestamptz, replayed_by text, replay_handle uuid)
LANGUAGE plpgsql STABLE SET jit = off AS $$
BEGIN
    RETURN QUERY
    SELECT d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body, d.attempts,
           d.reason, d.dead_lettered_at, d.replays, d.replayed_at, d.replayed_by, d.replay_handle
      FROM sbworker.dead_letter d
     WHERE p_since IS NULL OR d.dead_lettered_at >= p_since
     ORDER BY d.id DESC
     LIMIT p_limit;
END $$;

-- One dead letter (no row: no such id).
CREATE OR REPLACE FUNCTION sbworker.dead_letter(p_id bigint)
RETURNS TABLE (id bigint, queue text, service_name text, far_service text, message_type_name text,
               message_body bytea, attempts int, reason text, dead_lettered_at timestamptz, replays int,
               replayed_at timestamptz, replayed_by text, replay_handle uuid)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
    SELECT d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body, d.attempts,
           d.reason, d.dead_lettered_at, d.replays, d.replayed_at, d.replayed_by, d.replay_handle
      FROM sbworker.dead_letter d
     WHERE d.id = p_id;
END $$;

-- The key a Vraag stands for, read from its body (UTF-8, or UTF-16 as T-SQL clients
-- send it): no row when the body is not a Vraag that can be read.
CREATE OR REPLACE FUNCTION sbworker.vraag_key(p_body bytea,
    OUT vraag_id uuid, OUT dienstverband_id int, OUT periode_id int, OUT versie bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_xml  xml;
    v_ns   text[] := ARRAY[ARRAY['v', 'http://www.sdbgroep.nl/MPlus/Rekenserver/2008']];
BEGIN
    BEGIN
        IF length(p_body) >= 2 AND (get_byte(p_body, 0) IN (0, 254, 255) OR get_byte(p_body, 1) = 0) THEN
            v_xml := xmlparse(DOCUMENT sb.utf16_text(p_body));
        ELSE
            v_xml := xmlparse(DOCUMENT convert_from(p_body, 'UTF8'));
        END IF;
        vraag_id := ((xpath('/v:LoonfactorBerekeningVraag/@Id', v_xml, v_ns))[1])::text::uuid;
        versie := ((xpath('/v:LoonfactorBerekeningVraag/@Versie', v_xml, v_ns))[1])::text::bigint;
        dienstverband_id := ((xpath('/v:LoonfactorBerekeningVraag/v:Dienstverband/@Id', v_xml, v_ns))[1])::text::int;
        periode_id := ((xpath('/v:LoonfactorBerekeningVraag/v:Periode/@Id', v_xml, v_ns))[1])::text::int;
    EXCEPTION WHEN OTHERS THEN
        vraag_id := NULL;
    END;
    IF vraag_id IS NULL OR versie IS NULL OR dienstverband_id IS NULL OR periode_id IS NULL THEN
        vraag_id := NULL; dienstverband_id := NULL; periode_id := NULL; versie := NULL;
    END IF;
END $$;

-- Sends a dead letter's message again, byte for byte, on a new dialog from the service
-- that sent it to the service that received it, and marks the entry replayed (by whom
-- and which login, when, the new dialog); the entry is kept. When the body is a Vraag,
-- its key and version are read from it here (never taken from the caller): the dialog
-- joins the key's conversation group, the calculation log gets its row as for every
-- Vraag sent, and a version the roster never reached is refused (a forged entry cannot
-- block the key's real results). With p_unless_replayed, an entry replayed already is
-- left alone (NULL is returned): `replay --all` run twice at once sends each entry once.
-- Returns the new dialog's handle.
DROP FUNCTION IF EXISTS sbworker.replay_dead_letter(bigint, text, uuid, int, int, bigint);
CREATE OR REPLACE FUNCTION sbworker.replay_dead_letter(p_id bigint, p_by text, p_unless_replayed boolean DEFAULT false)
RETURNS uuid LANGUAGE plpgsql AS $$
DECLARE
    d        sbworker.dead_letter;
    k        record;
    v_group  uuid;
    v_roster bigint;
    v_handle uuid;
BEGIN
    SELECT * INTO d FROM sbworker.dead_letter WHERE id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        PERFORM sb.fail('P0002', format('dead letter %s does not exist', p_id));
    END IF;
    IF p_unless_replayed AND d.replays > 0 THEN
        RETURN NULL;
    END IF;
    -- Only what the initiator sends (a request) can begin a dialog again.
    IF NOT EXISTS (SELECT 1 FROM sb.contract_message cm
                    WHERE cm.contract = d.service_contract_name AND cm.message_type = d.message_type_name
                      AND cm.sent_by IN ('INITIATOR', 'ANY')) THEN
        PERFORM sb.fail('22023', format('dead letter %s is a %s, which the initiator of contract %s does not send: '
            'only requests can be sent again (a stale key is sent again by the sweep)', p_id, d.message_type_name,
            d.service_contract_name));
    END IF;
    IF sb.side() = 'calc' THEN
        PERFORM sb.fail('55000', format('dead letter %s was diverted on the calculation side of a split install, '
            'which begins no dialogs: its key is sent again from the roster side (dead-letter replay --roster URL)',
            p_id));
    END IF;
    SELECT * INTO k FROM sbworker.vraag_key(d.message_body);
    IF k.vraag_id IS NOT NULL AND to_regclass('rekenserver.sleutel') IS NOT NULL THEN
        EXECUTE 'SELECT versie, group_id FROM rekenserver.sleutel WHERE dienstverband_id = $1 AND periode_id = $2'
           INTO v_roster, v_group USING k.dienstverband_id, k.periode_id;
        IF v_roster IS NULL OR k.versie > v_roster THEN
            PERFORM sb.fail('22023', format('dead letter %s asks for version %s of key (%s, %s), which the roster '
                'never reached (it is at %s): it is not sent', p_id, k.versie, k.dienstverband_id, k.periode_id,
                coalesce(v_roster::text, 'no version')));
        END IF;
    END IF;
    IF d.far_service IS NULL THEN
        PERFORM sb.fail('22023', format('dead letter %s does not say which service sent it (it was diverted '
            'after its conversation was gone), so it cannot be sent again', p_id));
    END IF;
    v_handle := sb.begin_dialog(d.far_service, d.service_name, d.service_contract_name, v_group,
                                rekenserver.dialog_levensduur());
    PERFORM sb.send(v_handle, d.message_type_name, d.message_body);
    IF k.vraag_id IS NOT NULL THEN
        -- The Vraag as sent, for the evidence: its text read as sbworker.vraag_key read it
        -- (which succeeded, so the body decodes).
        INSERT INTO rekenserver.berekening_log (dialog_handle, vraag_id, dienstverband_id, periode_id, versie, vraag)
        VALUES (v_handle, k.vraag_id, k.dienstverband_id, k.periode_id, k.versie,
                CASE WHEN length(d.message_body) >= 2
                          AND (get_byte(d.message_body, 0) IN (0, 254, 255) OR get_byte(d.message_body, 1) = 0)
                     THEN sb.utf16_text(d.message_body)
                     ELSE convert_from(d.message_body, 'UTF8') END);
    END IF;
    UPDATE sbworker.dead_letter
       SET replays = replays + 1, replayed_at = clock_timestamp(), replayed_by = p_by || ' as ' || session_user,
           replay_handle = v_handle
     WHERE id = p_id;
    RETURN v_handle;
END $$;

-- A dead letter of the calculation side of a split install whose key the roster side
-- sent again (`dead-letter replay --roster`: rekenserver.stuur_vraag there, on dialog
-- p_handle): marked replayed as sbworker.replay_dead_letter marks one. False, and
-- nothing changed, when p_unless_replayed and another run replayed it meanwhile.
CREATE OR REPLACE FUNCTION sbworker.note_replayed(p_id bigint, p_by text, p_handle uuid, p_unless_replayed boolean)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    UPDATE sbworker.dead_letter
       SET replays = replays + 1, replayed_at = clock_timestamp(), replayed_by = p_by || ' as ' || session_user,
           replay_handle = p_handle
     WHERE id = p_id AND NOT (p_unless_replayed AND replays > 0);
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT EXISTS (SELECT 1 FROM sbworker.dead_letter WHERE id = p_id) THEN
        PERFORM sb.fail('P0002', format('dead letter %s does not exist', p_id));
    END IF;
    RETURN false;
END $$;

-- Deletes up to p_batch dead letters diverted before p_before, oldest first; returns
-- how many. The caller repeats until it returns 0 (short transactions, no long locks).
CREATE OR REPLACE FUNCTION sbworker.purge_dead_letters(p_before timestamptz, p_batch int)
RETURNS int LANGUAGE plpgsql AS $$
DECLARE
    v_n int;
BEGIN
    DELETE FROM sbworker.dead_letter
     WHERE id IN (SELECT id FROM sbworker.dead_letter WHERE dead_lettered_at < p_before
                   ORDER BY dead_lettered_at LIMIT p_batch FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_n = ROW_COUNT;
    RETURN v_n;
END $$;

-- What a person did from the web page (`sbworker web`): one row per action, with the
-- database login that did it (session_user: the page runs each action on the login the
-- person signed in with), the filter or id it acted on, and how many letters it touched.
-- Beside the dead letters, not in rekenserver.run_log: the calculation side of a split
-- install has dead letters and no run log.
CREATE TABLE IF NOT EXISTS sbworker.action_log (
    id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    who     text NOT NULL DEFAULT session_user,
    action  text NOT NULL,
    detail  text NOT NULL,
    letters bigint NOT NULL
);

-- The dead letters a filter picks, newest first, at most p_limit, none above p_upto (the
-- page's cursor: the last id shown minus one). A NULL filter value picks all: p_queue
-- the queue, p_reason a text the reason holds (any case), p_replayed whether the letter
-- was sent again, p_id one letter. The id's key serves the order and the cursor.
CREATE OR REPLACE FUNCTION sbworker.dead_letter_page(p_queue text, p_reason text, p_replayed boolean,
                                                     p_upto bigint, p_limit int, p_id bigint)
RETURNS TABLE (id bigint, queue text, service_name text, far_service text, message_type_name text,
               message_body bytea, attempts int, reason text, dead_lettered_at timestamptz, replays int,
               replayed_at timestamptz, replayed_by text, replay_handle uuid)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT d.id, d.queue, d.service_name, d.far_service, d.message_type_name, d.message_body, d.attempts,
           d.reason, d.dead_lettered_at, d.replays, d.replayed_at, d.replayed_by, d.replay_handle
      FROM sbworker.dead_letter d
     WHERE (p_queue IS NULL OR d.queue = p_queue)
       AND (p_reason IS NULL OR strpos(lower(d.reason), lower(p_reason)) > 0)
       AND (p_replayed IS NULL OR (d.replays > 0) = p_replayed)
       AND (p_upto IS NULL OR d.id <= p_upto)
       AND (p_id IS NULL OR d.id = p_id)
     ORDER BY d.id DESC
     LIMIT p_limit
$$;

-- How many dead letters the filter picks (as sbworker.dead_letter_page), the highest id
-- among them and the sum of their ids: what a bulk action's confirmation shows and then
-- acts on (the sum tells the confirmed set from another of the same count).
CREATE OR REPLACE FUNCTION sbworker.dead_letter_count(p_queue text, p_reason text, p_replayed boolean,
                                                      p_upto bigint, p_id bigint, OUT letters bigint,
                                                      OUT last_id bigint, OUT id_sum bigint)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT count(*), max(d.id), coalesce(sum(d.id), 0)::bigint
      FROM sbworker.dead_letter d
     WHERE (p_queue IS NULL OR d.queue = p_queue)
       AND (p_reason IS NULL OR strpos(lower(d.reason), lower(p_reason)) > 0)
       AND (p_replayed IS NULL OR (d.replays > 0) = p_replayed)
       AND (p_upto IS NULL OR d.id <= p_upto)
       AND (p_id IS NULL OR d.id = p_id)
$$;

-- Deletes exactly the set a person confirmed: the letters the filter picks at or below
-- p_upto, which must still be p_expected letters whose ids add up to p_expected_sum
-- (otherwise nothing is deleted and the error says to look again: a letter replayed, or
-- diverted by a transaction that committed late, changed the set).
-- Written to sbworker.action_log with p_detail (the filter as the page showed it).
-- Returns how many were deleted.
CREATE OR REPLACE FUNCTION sbworker.purge_dead_letters_matching(p_queue text, p_reason text, p_replayed boolean,
                                                                p_upto bigint, p_expected bigint, p_detail text,
                                                                p_id bigint, p_expected_sum bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
BEGIN
    IF p_upto IS NULL OR p_expected IS NULL THEN
        PERFORM sb.fail('22023', 'a purge by filter needs the highest id and the count that were confirmed');
    END IF;
    SELECT coalesce(array_agg(d.id), '{}') INTO v_ids
      FROM (SELECT d.id FROM sbworker.dead_letter d
             WHERE (p_queue IS NULL OR d.queue = p_queue)
               AND (p_reason IS NULL OR strpos(lower(d.reason), lower(p_reason)) > 0)
               AND (p_replayed IS NULL OR (d.replays > 0) = p_replayed)
               AND d.id <= p_upto
               AND (p_id IS NULL OR d.id = p_id)
             ORDER BY d.id
             FOR UPDATE) d;
    IF cardinality(v_ids) <> p_expected
       OR (SELECT coalesce(sum(i), 0) FROM unnest(v_ids) i) <> coalesce(p_expected_sum, -1) THEN
        PERFORM sb.fail('55000', format('the filter picks %s dead letters now, not the %s confirmed (or not the same '
            'ones): nothing was deleted; look again and confirm anew', cardinality(v_ids), p_expected));
    END IF;
    DELETE FROM sbworker.dead_letter WHERE id = ANY (v_ids);
    INSERT INTO sbworker.action_log (action, detail, letters) VALUES ('purge', p_detail, cardinality(v_ids));
    RETURN cardinality(v_ids);
END $$;

-- Writes an action done through other functions (a replay from the page: the letters
-- carry who replayed them; this row says what the person asked for) to
-- sbworker.action_log, as the login that calls it.
CREATE OR REPLACE FUNCTION sbworker.note_action(p_action text, p_detail text, p_letters bigint)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO sbworker.action_log (action, detail, letters) VALUES (p_action, p_detail, p_letters)
$$;

-- The newest actions of the web page, at most p_limit.
CREATE OR REPLACE FUNCTION sbworker.actions(p_limit int)
RETURNS TABLE (id bigint, at timestamptz, who text, action text, detail text, letters bigint)
LANGUAGE sql STABLE SET jit = off AS $$
    SELECT a.id, a.at, a.who, a.action, a.detail, a.letters FROM sbworker.action_log a ORDER BY a.id DESC LIMIT p_limit
$$;

-- Requests answered per minute over the last p_minutes (the web page's plots): per
-- minute back from now (0: the current one), how many were answered, how many of them
-- with a Fout, and the time from the Vraag sent (at the roster's commit, or by a sweep or
-- a replay) to its answer, median and 95th percentile in whole ms (a request the sweep
-- found lost, "lost: …", counts as answered but not in the times: its answer time is
-- when the loss was noticed). A row answered after this statement began counts in the
-- current minute. Read through the index of
-- the sweep's retention (outcome, answered), one range per outcome. No rows where there
-- is no calculation log.
CREATE OR REPLACE FUNCTION sbworker.rates(p_minutes int)
RETURNS TABLE (minutes_ago int, answered bigint, failed bigint, p50_ms bigint, p95_ms bigint)
LANGUAGE plpgsql STABLE SET jit = off AS $$
BEGIN
    IF pg_catalog.to_regclass('rekenserver.berekening_log') IS NULL THEN
        RETURN;
    END IF;
    RETURN QUERY EXECUTE $q$
        SELECT greatest(0, floor(extract(epoch FROM (now() - l.beantwoord_op)) / 60))::int,
               count(*), count(*) FILTER (WHERE l.uitkomst = 'fout'),
               round(percentile_cont(0.5) WITHIN GROUP (ORDER BY CASE WHEN l.foutmelding LIKE 'lost:%' THEN NULL
                   ELSE extract(epoch FROM (l.beantwoord_op - l.verzonden_op)) * 1000 END))::bigint,
               round(percentile_cont(0.95) WITHIN GROUP (ORDER BY CASE WHEN l.foutmelding LIKE 'lost:%' THEN NULL
                   ELSE extract(epoch FROM (l.beantwoord_op - l.verzonden_op)) * 1000 END))::bigint
          FROM rekenserver.berekening_log l
         WHERE l.uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')
           AND l.beantwoord_op >= now() - make_interval(mins => $1)
         GROUP BY 1 ORDER BY 1 $q$ USING p_minutes;
END $$;

-- A time as the status document writes it: ISO 8601 in UTC with milliseconds.
CREATE OR REPLACE FUNCTION sbworker.utc_text(p_at timestamptz) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
$$;

-- Everything `sbworker status` shows, as one JSON document (its shape is documented in
-- docs/operations.md and is the same from SQL Server). p_recent_minutes: the window of
-- "retried recently"; p_stale_minutes: a key is stale when its roster changed more than
-- this long ago and its stored result is older.
-- (The operations' functions run with `jit = off`: a table of a few rows that autovacuum
-- never analyzes (sb.queue stays below its threshold) is estimated at a thousand rows,
-- which put this report over jit_above_cost: 150 ms of compiling for a 20 ms answer,
-- measured by `bench --parts web`. Their questions are small; compiling never pays.)
CREATE OR REPLACE FUNCTION sbworker.status_report(p_recent_minutes int, p_stale_minutes int)
RETURNS jsonb LANGUAGE plpgsql STABLE SET jit = off AS $$
DECLARE
    v_queues    jsonb;
    v_workers   jsonb;
    v_convs     jsonb;
    v_oldest    jsonb;
    v_idle      bigint := NULL;
    v_oldest_request double precision := NULL;
    v_stale     jsonb := NULL;
    v_runs      jsonb := NULL;
    v_export    jsonb;
    v_routes    jsonb := NULL;
BEGIN
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'queue', q.name,
               'enabled', q.enabled,
               'poison_handling', q.poison_handling,
               'max_readers', q.max_readers,
               'messages', (SELECT count(*) FROM sb.message m WHERE m.queue = q.name),
               'groups_waiting', (SELECT count(*) FROM sb.group_ready g WHERE g.queue = q.name),
               'oldest_message_seconds', (SELECT extract(epoch FROM clock_timestamp() - min(m.enqueued_at))
                                            FROM sb.message m WHERE m.queue = q.name),
               'retried_recently', (SELECT count(*) FROM sbworker.message_attempt a
                                     WHERE a.queue = q.name AND (a.attempts > 1 OR a.transient_failures > 0)
                                       AND a.last_attempt_at > clock_timestamp() - make_interval(mins => p_recent_minutes)),
               'dead_letters', (SELECT count(*) FROM sbworker.dead_letter d WHERE d.queue = q.name),
               'dead_letters_not_replayed', (SELECT count(*) FROM sbworker.dead_letter d
                                              WHERE d.queue = q.name AND d.replays = 0))
             ORDER BY q.name), '[]')
      INTO v_queues FROM sb.queue q;
    SELECT coalesce(jsonb_agg(jsonb_build_object(
               'instance', w.instance, 'host', w.host, 'pid', w.pid, 'version', w.version,
               'started_at', sbworker.utc_text(w.started_at),
               'beat_seconds_ago', extract(epoch FROM clock_timestamp() - w.beat_at),
               'interval_ms', w.interval_ms, 'queues', w.queues) ORDER BY w.started_at), '[]')
      INTO v_workers FROM sbworker.worker_instance w;
    SELECT coalesce(jsonb_object_agg(state, n), '{}') INTO v_convs
      FROM (SELECT state, count(*) AS n FROM sb.endpoint GROUP BY state) s;
    IF to_regclass('rekenserver.berekening_log') IS NOT NULL THEN
        -- Conversation reuse: a key's dialog that carries no open request waits for its
        -- idle timer, and the collector ends it (docs/postgresql.md). Counted apart (its
        -- initiator's side), and left out of the oldest open conversation (both sides):
        -- it is not work in flight, and a key edited all day keeps it open all day. (The
        -- requests are named by the initiator's handle: a target's is its far handle.)
        EXECUTE $q$
            SELECT count(*) FROM sb.endpoint e
             WHERE e.contract = '/Rekenserver/LoonfactorBerekening/SleutelContract' AND e.is_initiator
               AND e.state IN ('SO', 'CO')
               AND NOT EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                                WHERE l.dialog_handle = e.handle AND l.uitkomst IS NULL)$q$
          INTO v_idle;
        EXECUTE $q$
            SELECT jsonb_build_object('handle', e.handle, 'service', e.service, 'state', e.state,
                                      'age_seconds', extract(epoch FROM clock_timestamp() - e.created_at))
              FROM sb.endpoint e
             WHERE e.state <> 'CD'
               AND NOT (e.contract = '/Rekenserver/LoonfactorBerekening/SleutelContract'
                        AND NOT EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                                         WHERE l.dialog_handle = CASE WHEN e.is_initiator THEN e.handle
                                                                      ELSE e.far_handle END
                                           AND l.uitkomst IS NULL))
             ORDER BY e.created_at LIMIT 1$q$
          INTO v_oldest;
        -- The oldest request without an outcome (a reused dialog's age is not its
        -- request's): `status` flags one older than the stale threshold.
        EXECUTE $q$
            SELECT extract(epoch FROM clock_timestamp() - min(l.verzonden_op))
              FROM rekenserver.berekening_log l WHERE l.uitkomst IS NULL$q$
          INTO v_oldest_request;
    ELSE
        SELECT jsonb_build_object('handle', e.handle, 'service', e.service, 'state', e.state,
                                  'age_seconds', extract(epoch FROM clock_timestamp() - e.created_at))
          INTO v_oldest FROM sb.endpoint e WHERE e.state <> 'CD' ORDER BY e.created_at LIMIT 1;
    END IF;
    IF to_regclass('rekenserver.sleutel') IS NOT NULL THEN
        EXECUTE $q$
            SELECT jsonb_build_object('count', count(*), 'oldest_seconds',
                       extract(epoch FROM clock_timestamp() - min(s.gewijzigd_op)))
              FROM rekenserver.sleutel s LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
             WHERE s.versie > coalesce(r.versie, 0)
               AND s.gewijzigd_op < clock_timestamp() - make_interval(mins => $1)$q$
          INTO v_stale USING p_stale_minutes;
    END IF;
    IF to_regclass('rekenserver.run_log') IS NOT NULL THEN
        EXECUTE $q$
            SELECT coalesce(jsonb_agg(jsonb_build_object('started_at', sbworker.utc_text(r.start),
                       'ended_at', sbworker.utc_text(r.eind),
                       'ms', r.ms, 'candidates', r.kandidaten, 'sent', r.verzonden, 'deleted', r.verwijderd,
                       'error', nullif(r.fout, '')) ORDER BY r.id DESC), '[]')
              FROM (SELECT * FROM rekenserver.run_log WHERE run_id IS NULL AND stap = 'run'
                     ORDER BY id DESC LIMIT 5) r$q$
          INTO v_runs;
    END IF;
    -- The last export batch claimed (sbworker export): when, how many, how many confirmed.
    SELECT jsonb_build_object('batch', b.export_batch, 'claimed_at', sbworker.utc_text(b.claimed_at), 'results', b.results,
                              'confirmed', b.confirmed)
      INTO v_export
      FROM (SELECT r.export_batch, max(r.geclaimd_op) AS claimed_at, count(*) AS results,
                   count(*) FILTER (WHERE r.export_status = 2) AS confirmed
              FROM rekenserver.resultaat r WHERE r.export_batch IS NOT NULL
             GROUP BY r.export_batch ORDER BY max(r.geclaimd_op) DESC LIMIT 1) b;
    -- Routes to and from other databases (008_routes.sql): each route out, whether its
    -- far side reads it and how far behind, and while it does not, the messages it holds
    -- (sb.route_backlog); each subscription in, whether it applies;
    -- the messages that arrived and could not be delivered.
    IF to_regclass('sb.route_state') IS NOT NULL
       AND to_regclass('pg_catalog.pg_stat_subscription_stats') IS NOT NULL THEN
        EXECUTE $q$
            SELECT jsonb_build_object(
                'out', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                            'route', r.route, 'service', r.service, 'address', r.address,
                            'subscribed', r.subscribed, 'reading', r.reading, 'behind_bytes', r.behind_bytes,
                            'wal_status', r.wal_status,
                            'waiting', b.messages,
                            'oldest_waiting_seconds', extract(epoch FROM clock_timestamp() - b.oldest),
                            'waiting_counted_all', b.complete)
                            ORDER BY r.route), '[]')
                         FROM sb.route_state r LEFT JOIN LATERAL sb.route_backlog(r.route) b ON true),
                'in', (SELECT coalesce(jsonb_agg(jsonb_build_object(
                           'subscription', s.subname, 'enabled', s.subenabled, 'applying', st.pid IS NOT NULL,
                           'last_message_seconds', extract(epoch FROM clock_timestamp() - st.last_msg_receipt_time),
                           'apply_errors', coalesce(ss.apply_error_count, 0))
                           ORDER BY s.subname), '[]')
                         FROM pg_catalog.pg_subscription s
                         -- (The leader apply worker only: PostgreSQL 16's parallel apply
                         -- workers have no table either, and a leader_pid; 15 has no such
                         -- column, read through jsonb so that one query serves both.)
                         LEFT JOIN pg_catalog.pg_stat_subscription st
                                ON st.subid = s.oid AND st.relid IS NULL AND to_jsonb(st) ->> 'leader_pid' IS NULL
                         LEFT JOIN pg_catalog.pg_stat_subscription_stats ss ON ss.subid = s.oid
                        WHERE s.subdbid = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
                          AND s.subname LIKE 'sb\_route\_%'),
                'undeliverable', (SELECT jsonb_build_object(
                                      'count', count(*),
                                      'recent', count(*) FILTER (WHERE e.arrived_at > clock_timestamp() - make_interval(mins => $1)),
                                      'last_error', (SELECT x.error FROM sb.transmission_error x ORDER BY x.id DESC LIMIT 1))
                                    FROM sb.transmission_error e))
             WHERE EXISTS (SELECT 1 FROM sb.route)
                OR EXISTS (SELECT 1 FROM sb.transmission_error)$q$
          INTO v_routes USING p_recent_minutes;
    END IF;
    RETURN jsonb_build_object(
        'backend', 'postgresql',
        'at', sbworker.utc_text(clock_timestamp()),
        'queues', v_queues,
        'workers', v_workers,
        'conversations', jsonb_build_object('by_state', v_convs, 'oldest_open', v_oldest, 'reused_idle', v_idle,
                                            'oldest_request_seconds', v_oldest_request),
        'stale_keys', v_stale,
        'sweeps', v_runs,
        'last_export', v_export,
        'routes', v_routes);
END $$;

INSERT INTO sb.migration (version) VALUES (7) ON CONFLICT DO NOTHING;

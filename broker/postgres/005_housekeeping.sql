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
CREATE INDEX IF NOT EXISTS run_log_start ON rekenserver.run_log (start);

-- Whether a calculation's failure was the environment's, not the request's, so sending
-- the same roster version again can succeed: an internal Fout (the message was diverted
-- after failed attempts) or an error end (a diversion that could not send a Fout, a
-- broker error). A Fout of any other reason is about the request itself.
CREATE OR REPLACE FUNCTION rekenserver.fout_te_herstellen(p_melding text)
RETURNS boolean LANGUAGE sql IMMUTABLE AS $$
    SELECT coalesce(p_melding LIKE 'internal (%' OR p_melding LIKE 'error %', false)
$$;

-- Keys whose roster version is newer than their stored result, with no calculation in
-- flight, oldest change first. A key whose latest version ended in a Fout about the
-- request is left out (it would only fail again: it waits for a roster change); one
-- whose latest version failed by the environment (herstel: a repair) is sent again, at
-- most three times for the same version, so a request that keeps killing the worker is
-- not sent forever.
CREATE OR REPLACE VIEW rekenserver.verouderde_sleutel AS
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
                           OR (l.versie = s.versie AND l.uitkomst = 'fout'
                               AND NOT rekenserver.fout_te_herstellen(l.foutmelding))))
   AND (SELECT count(*) FROM rekenserver.berekening_log l
         WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
           AND l.versie = s.versie AND l.uitkomst = 'fout') < 3;

INSERT INTO sb.migration (version) VALUES (5) ON CONFLICT DO NOTHING;

-- sbworker PostgreSQL broker, version 5: housekeeping (installed with the roster).
--
-- Idempotent. The run log of `sbworker sweep` (seed 000's tabela_przebiegow): one row
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

-- Keys whose roster version is newer than their stored result, with no calculation in
-- flight and whose latest version did not end in a Fout (that would only fail again:
-- it waits for a roster change), oldest change first.
CREATE OR REPLACE VIEW rekenserver.verouderde_sleutel AS
SELECT s.dienstverband_id, s.periode_id, s.versie, s.gewijzigd_op
  FROM rekenserver.sleutel s
  LEFT JOIN rekenserver.resultaat r USING (dienstverband_id, periode_id)
 WHERE s.versie > coalesce(r.versie, 0)
   AND NOT EXISTS (SELECT 1 FROM rekenserver.berekening_log l
                    WHERE l.dienstverband_id = s.dienstverband_id AND l.periode_id = s.periode_id
                      AND (l.uitkomst IS NULL OR (l.versie = s.versie AND l.uitkomst = 'fout')));

INSERT INTO sb.migration (version) VALUES (5) ON CONFLICT DO NOTHING;

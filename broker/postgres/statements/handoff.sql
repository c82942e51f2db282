-- The statements of the payroll hand-off (sbworker export) and the housekeeping
-- (sbworker sweep), crates/core/src/handoff/. Parameters are $1, $2, ... as in the Rust calls.

-- The claim's transaction (crates/core/src/handoff/postgres.rs): the claim runs in it,
-- and it commits once the batch is written (a failure before: nothing is marked).
-- name: begin
BEGIN;

-- name: commit
COMMIT;

-- name: rollback
ROLLBACK;

-- Mode once: claims and marks exported in one transaction (at-most-once). Only results
-- with factor rows are claimed: a result with nothing to export is never marked. The
-- claim, then the factors (rekenserver.export_claim). $1 periode, $2 batch id.
-- name: claim_once
SELECT * FROM rekenserver.export_claim($1, $2, NULL);

-- Mode lease: claims what waits, and claims older than the lease ($3 seconds), for
-- confirmation by batch (at-least-once). $1 periode, $2 batch id.
-- name: claim_lease
SELECT * FROM rekenserver.export_claim($1, $2, $3);

-- Confirms a leased batch: its results are exported. Returns how many.
-- name: ack
WITH done AS (
    UPDATE rekenserver.resultaat SET export_status = 2, geexporteerd_op = clock_timestamp()
     WHERE export_batch = $1 AND export_status = 1
    -- The version claimed: a version with the same figures stored since has moved `versie`.
    RETURNING dienstverband_id, periode_id, coalesce(geexporteerde_versie, versie) AS versie
), stamped AS (
    -- When the version went out, in its evidence (the first time).
    UPDATE rekenserver.resultaat_historie h SET geexporteerd_op = clock_timestamp()
      FROM done d
     WHERE h.dienstverband_id = d.dienstverband_id AND h.periode_id = d.periode_id AND h.versie = d.versie
       AND h.geexporteerd_op IS NULL
)
SELECT count(*) FROM done;

-- Recompute's lock (one recompute at a time; a sweep may run beside it).
-- name: recompute_try_lock
SELECT pg_try_advisory_lock(hashtext('rekenserver.recompute'));

-- name: recompute_unlock
SELECT pg_advisory_unlock(hashtext('rekenserver.recompute'));

-- Up to $7 known keys after ($5, $6) in key order that match: $1 periods, $2 CAO code,
-- $3..$4 employees, $8/$9 named keys (pairwise) (NULL: no filter).
-- name: recompute_keys
SELECT dienstverband_id, periode_id FROM rekenserver.herbereken_sleutels($1, $2, $3, $4, $5, $6, $7, $8, $9);

-- Recomputes a batch ($1 dienstverbanden, $2 periods); how many Vraags went.
-- name: recompute_batch
SELECT rekenserver.herbereken($1, $2);

-- A key's stored versions with their evidence ($1 dienstverband, $2 period), oldest
-- first: version, stored at, the Vraag as sent, the factors' codes and values (as text,
-- exactly as stored), what computed it, when it was exported.
-- name: evidence
SELECT b.versie, b.opgeslagen_op::text, b.vraag,
       ARRAY(SELECT f.key FROM jsonb_each_text(b.factoren) f ORDER BY f.key),
       ARRAY(SELECT f.value FROM jsonb_each_text(b.factoren) f ORDER BY f.key), b.rekenversie,
       b.geexporteerd_op::text
  FROM rekenserver.bewijs($1, $2) b;

-- The sweep's lock: a session-level advisory lock, taken without waiting.
-- name: try_lock
SELECT pg_try_advisory_lock(hashtext('rekenserver.sweep'));

-- name: unlock
SELECT pg_advisory_unlock(hashtext('rekenserver.sweep'));

-- A run or step row; returns its id. $1 run id (NULL for a run row), $2 step.
-- name: log_start
INSERT INTO rekenserver.run_log (run_id, stap) VALUES ($1, $2) RETURNING id;

-- A recompute's progress on its row ($1): $2 keys recomputed, $3 Vraags sent so far.
-- name: log_progress
UPDATE rekenserver.run_log SET kandidaten = $2, verzonden = $3 WHERE id = $1;

-- Completes a row: $2 candidates, $3 sent, $4 deleted, $5 error or warning text.
-- name: log_end
UPDATE rekenserver.run_log
   SET eind = clock_timestamp(), ms = (extract(epoch FROM clock_timestamp() - start) * 1000)::int,
       kandidaten = $2, verzonden = $3, verwijderd = $4, fout = $5
 WHERE id = $1;

-- Dialogs past their LIFETIME end with the broker's error on both sides (the collector
-- records it, and a later run sends the key again); how many.
-- name: expire_dialogs
SELECT rekenserver.verlopen_dialogen();

-- Requests whose dialog no longer exists get their outcome (lost, the environment's
-- fault), so their keys are stale again; how many.
-- name: mark_lost
SELECT rekenserver.markeer_verloren();

-- Up to $1 stale keys, oldest change first, and whether each is a repair (its latest
-- version failed by the environment's fault).
-- name: candidates
SELECT dienstverband_id, periode_id, herstel FROM rekenserver.verouderde_sleutel
 ORDER BY gewijzigd_op, dienstverband_id, periode_id
 LIMIT $1;

-- Sends the Vraag of each key ($1 dienstverbanden, $2 periods, pairwise); how many went.
-- name: send_keys
SELECT count(rekenserver.stuur_vraag(k.dv, k.p)) FROM unnest($1::int[], $2::int[]) AS k(dv, p);

-- Retention, one batch at a time: $1 days, $2 batch size; returns the rows deleted. The
-- cutoff is now() (each statement its own transaction: its start), not clock_timestamp():
-- a volatile function is no index condition, and the index would only be walked.
-- name: delete_run_log
WITH gone AS (
    DELETE FROM rekenserver.run_log WHERE id IN (
        SELECT id FROM rekenserver.run_log WHERE start < now() - make_interval(days => $1) ORDER BY id LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- The evidence of stored versions replaced more than $1 months ago (a version's
-- retention runs from the day a newer one replaced it, `vervangen_op`, so the version
-- that was paid keeps its evidence that long); a key's latest version (not replaced)
-- stays while the key does; $2 rows at a time, oldest first. The partial index on
-- vervangen_op holds replaced versions only: the rows kept are never read.
-- name: delete_evidence
WITH gone AS (
    DELETE FROM rekenserver.resultaat_historie WHERE id IN (
        SELECT h.id FROM rekenserver.resultaat_historie h
         WHERE h.vervangen_op < now() - make_interval(months => $1)
         ORDER BY h.vervangen_op LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- The log rows of requests answered more than $1 days ago (the run log's retention):
-- every outcome but a Fout of the key's current version, which the sweep reads (a
-- Fout about the request keeps the key waiting for a roster change; repairs count at
-- most three). Requests in flight stay, and so do those of a key's open reused dialog
-- (rekenserver.dialoog_stil finds the dialog's key through them). $2 rows at a time,
-- found through berekening_log_beantwoord (by outcome, then time): the only rows read
-- and kept are each key's current Fouts.
-- name: delete_requests
WITH gone AS (
    DELETE FROM rekenserver.berekening_log WHERE (dialog_handle, vraag_id) IN (
        SELECT l.dialog_handle, l.vraag_id FROM rekenserver.berekening_log l
         WHERE l.uitkomst IN ('opgeslagen', 'verouderd', 'vervangen', 'fout')
           AND l.beantwoord_op < now() - make_interval(days => $1)
           AND NOT EXISTS (SELECT 1 FROM rekenserver.sleutel s
                            WHERE s.dienstverband_id = l.dienstverband_id AND s.periode_id = l.periode_id
                              AND (s.dialog_handle = l.dialog_handle
                                   OR (l.uitkomst = 'fout' AND s.versie = l.versie)))
         LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- name: delete_dead_letters
WITH gone AS (
    DELETE FROM sbworker.dead_letter WHERE id IN (
        SELECT id FROM sbworker.dead_letter WHERE dead_lettered_at < clock_timestamp() - make_interval(days => $1)
         ORDER BY id LIMIT $2)
    RETURNING 1
)
SELECT count(*) FROM gone;

-- The sweep on the calculation side of a split install: only its dialogs past their
-- LIFETIME ended (the rest of the sweep is the roster side's); how many.
-- name: expire_only
SELECT rekenserver.verlopen_dialogen();

-- The keys a search picks (the web page): $1 dienstverband, $2 periode, $3 CAO code,
-- $4 state, $5 a text in the Fout (each NULL: any), after key ($6, $7), at most $8.
-- name: key_search
SELECT dienstverband_id, periode_id, cao, versie,
       to_char(gewijzigd_op AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), opgeslagen_versie,
       to_char(opgeslagen_op AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), export_status, fout
  FROM rekenserver.sleutels_zoek($1, $2, $3, $4, $5, $6, $7, $8);

-- Every Vraag sent for key ($1 dienstverband, $2 periode) the log holds, oldest first.
-- name: key_timeline
SELECT versie, to_char(verzonden_op AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       to_char(beantwoord_op AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), uitkomst, foutmelding
  FROM rekenserver.sleutel_tijdlijn($1, $2);

-- The newest runs (sweeps and recomputes), at most $1.
-- name: runs
SELECT id, stap, to_char(start AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       to_char(eind AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), ms, kandidaten, verzonden, verwijderd, fout
  FROM rekenserver.runs($1);

-- The newest export batches, at most $1.
-- name: export_batches
SELECT export_batch::text, periode_id, to_char(claimed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'),
       results, confirmed
  FROM rekenserver.export_batches($1);

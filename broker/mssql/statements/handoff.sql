-- The statements of `sbworker export --mssql` and `sbworker sweep --mssql`
-- (crates/core/src/handoff/mssql.rs): the procedures of broker/mssql/05_handoff.sql.

-- The claim runs in the caller's transaction, so that the batch is written before it
-- commits (a failure before the commit marks nothing).
-- name: begin
BEGIN TRANSACTION

-- name: commit
COMMIT TRANSACTION

-- name: rollback
IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION

-- @P1 periode, @P2 mode ('once' or 'lease'), @P3 lease minutes, @P4 batch id. Rows:
-- batch, sleutel, dienstverband_id, periode_id, versie, kaart_soort, loonfactor_code,
-- waarde (text).
-- name: claim
EXEC Rekenserver.export_claim @periode = @P1, @mode = @P2, @lease_minutes = @P3, @batch = @P4

-- @P1 batch id; one row: confirmed.
-- name: ack
EXEC Rekenserver.export_ack @batch = @P1

-- @P1 fuse, @P2 batch, @P3 retention days, @P4 delete batch, @P5 evidence retention
-- months; one row: skipped, lost, candidates, sent, repaired, fuse_reached,
-- deleted_log_rows, deleted_dead_letters, deleted_evidence.
-- name: sweep
EXEC Rekenserver.sweep @fuse = @P1, @batch = @P2, @retention_days = @P3, @delete_batch = @P4,
    @evidence_retention_months = @P5

-- `sbworker recompute --mssql` (04_roster.sql, 05_handoff.sql).
-- One row: the run-log id, NULL when another recompute holds the lock.
-- name: recompute_begin
EXEC Rekenserver.herberekening_begin

-- A running recompute's progress: @P1 run id, @P2 keys, @P3 sent so far.
-- name: recompute_progress
EXEC Rekenserver.herberekening_voortgang @run = @P1, @kandidaten = @P2, @verzonden = @P3

-- @P1 run id, @P2 keys, @P3 sent, @P4 error or warning text.
-- name: recompute_end
EXEC Rekenserver.herberekening_einde @run = @P1, @kandidaten = @P2, @verzonden = @P3, @fout = @P4

-- @P1 periods (JSON array), @P2 CAO, @P3..@P4 employees, @P5/@P6 after this key, @P7 at
-- most, @P8 named keys (JSON array of {"dv", "p"}); rows: dienstverband_id, periode_id.
-- name: recompute_keys
EXEC Rekenserver.herbereken_sleutels @periodes = @P1, @cao = @P2, @dv_van = @P3, @dv_tot = @P4, @na_dv = @P5,
    @na_periode = @P6, @aantal = @P7, @sleutels = @P8

-- @P1 the keys (JSON array of {"dv", "p"}), in the caller's transaction; one row: sent.
-- name: recompute_batch
EXEC Rekenserver.herbereken @sleutels = @P1

-- @P1 dienstverband, @P2 periode; rows: versie, opgeslagen_op, vraag, factoren (JSON
-- array of {"c", "w"}), rekenversie, geexporteerd_op.
-- name: evidence
EXEC Rekenserver.bewijs @dv = @P1, @periode = @P2

-- The keys a search picks (the web page): @P1 dienstverband, @P2 periode, @P3 CAO code,
-- @P4 state, @P5 a text in the Fout (each NULL: any), after key (@P6, @P7), at most @P8.
-- name: key_search
EXEC Rekenserver.sleutels_zoek @dv = @P1, @periode = @P2, @cao = @P3, @staat = @P4, @reden = @P5, @na_dv = @P6, @na_periode = @P7, @aantal = @P8

-- Every Vraag sent for key (@P1 dienstverband, @P2 periode) the log holds, oldest first.
-- name: key_timeline
EXEC Rekenserver.sleutel_tijdlijn @dv = @P1, @periode = @P2

-- The newest runs (sweeps and recomputes), at most @P1.
-- name: runs
EXEC Rekenserver.runs @limit = @P1

-- The newest export batches, at most @P1.
-- name: export_batches
EXEC Rekenserver.export_batches @limit = @P1

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

-- @P1 fuse, @P2 batch, @P3 retention days, @P4 delete batch; one row: skipped, lost,
-- candidates, sent, repaired, fuse_reached, deleted_log_rows, deleted_dead_letters.
-- name: sweep
EXEC Rekenserver.sweep @fuse = @P1, @batch = @P2, @retention_days = @P3, @delete_batch = @P4

-- The T-SQL `sbworker bench` sends on the SQL Server transport (through the emulator,
-- which runs bench.apply as the PostgreSQL function of crates/tools/sql/postgres/bench.sql).

-- name: apply
EXEC bench.apply @conversation = @P1, @seq = @P2, @body = @P3

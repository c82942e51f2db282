-- The statements the Service Broker emulator (src/emulator/server/procedures.rs) sends of its own,
-- beyond the PostgreSQL session's: procedures it serves that are plain PostgreSQL
-- functions. Parameters are $1, $2, ... as in the Rust calls.

-- `EXEC bench.apply @conversation, @seq, @body`: the bench's business effect, a function
-- the bench installs (broker/postgres/bench.sql).
-- name: bench_apply
SELECT bench.apply($1, $2, $3);

-- The statements the Service Broker emulator (crates/tools/src/emulator/server/procedures.rs) sends of its own,
-- beyond the PostgreSQL session's: procedures it serves that are plain PostgreSQL
-- functions. Parameters are $1, $2, ... as in the Rust calls.

-- `EXEC bench.apply @conversation, @seq, @body`: the bench's business effect, a function
-- the bench installs (crates/tools/sql/postgres/bench.sql).
-- name: bench_apply
SELECT bench.apply($1, $2, $3);

-- `SELECT COUNT(*) FROM queue`: the messages waiting (committed ones), and whether the
-- queue exists.
-- name: queue_depth
SELECT (SELECT count(*) FROM sb.message WHERE queue = $1), EXISTS (SELECT 1 FROM sb.queue WHERE name = $1);

-- `SELECT … FROM sys.conversation_endpoints WHERE conversation_handle = @h`.
-- name: endpoint
SELECT handle, conversation_id, is_initiator, group_id, state, far_service
  FROM sb.endpoint WHERE handle = $1;

-- `ALTER QUEUE q WITH STATUS = …, POISON_MESSAGE_HANDLING (STATUS = …), ACTIVATION
-- (MAX_QUEUE_READERS = …)` (NULL: unchanged).
-- name: alter_queue
SELECT sb.alter_queue($1, p_enabled => $2, p_poison_handling => $3, p_max_readers => $4);

-- A statement inside a client's transaction with XACT_ABORT OFF: on an error only the
-- statement is undone, as SQL Server undoes it, and the transaction goes on.
-- name: statement_savepoint
SAVEPOINT sbworker_statement;

-- name: statement_release
RELEASE SAVEPOINT sbworker_statement;

-- name: statement_undo
ROLLBACK TO SAVEPOINT sbworker_statement;

-- Whether a conversation group has messages waiting (a RECEIVE of it that found none
-- found it held by another session): `RECEIVE … WHERE conversation_group_id = g` waits.
-- name: group_waiting
SELECT EXISTS (SELECT 1 FROM sb.group_ready WHERE group_id = $1 AND queue = $2);

-- The queues the emulated event-based activation watches (server/activation.rs): every
-- queue but the notification queue $1, and the database's name for the notifications.
-- name: watched_queues
SELECT name, current_database()::text FROM sb.queue WHERE name <> $1 ORDER BY name;

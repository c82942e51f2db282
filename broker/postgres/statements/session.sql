-- The statements the PostgreSQL transport (crates/core/src/broker/postgres/) sends, one per
-- "-- name:" section. Parameters are $1, $2, ... as in the Rust calls.

-- name: channel
SELECT sb.channel($1);

-- name: receive
SELECT message_id, conversation_group_id, conversation_handle, message_sequence_number,
       message_type_name, message_body, service_name, service_contract_name
  FROM sb.receive($1, $2, $3, $4, $5);

-- The same with the receiver's waiting mark folded in ($6: 0 none, 1 drop it first, 2
-- take it first); with 2 and nothing found, one row with no message and gate_free.
-- name: receive_marking
SELECT message_id, conversation_group_id, conversation_handle, message_sequence_number,
       message_type_name, message_body, service_name, service_contract_name, gate_free
  FROM sb.receive_marking($1, $2, $3, $4, $5, $6);

-- name: get_conversation_group
SELECT sb.get_conversation_group($1);

-- name: begin_wait
SELECT sb.begin_wait($1);

-- name: end_wait
SELECT sb.end_wait($1);

-- name: begin_dialog
SELECT sb.begin_dialog($1, $2, $3, $4, $5);

-- name: send
SELECT sb.send($1, $2, $3);

-- name: end_conversation
SELECT sb.end_conversation($1, $2, $3);

-- name: end_conversation_cleanup
SELECT sb.end_conversation_cleanup($1);

-- name: move_conversation
SELECT sb.move_conversation($1, $2);

-- name: begin_conversation_timer
SELECT sb.begin_conversation_timer($1, $2);

-- The messages of a rolled-back transaction, by group ($1) and id ($2), pairwise.
-- name: note_rollback
SELECT sb.note_rollback($1, $2);

-- The same against an install of a release before, by ids alone.
-- name: note_rollback_v1
SELECT sb.note_rollback($1);

-- The worker's bookkeeping (broker/postgres/002_worker.sql). ---------------------------

-- Counts one more attempt of each message ($2 handles, $3 sequence numbers, pairwise),
-- on a connection outside the receiving transaction (autocommit).
-- name: count_attempts
INSERT INTO sbworker.message_attempt AS a (conversation_handle, message_sequence_number, queue, attempts)
SELECT k.h, k.s, $1, 1 FROM unnest($2::uuid[], $3::bigint[]) AS k(h, s)
    ON CONFLICT (conversation_handle, message_sequence_number)
    DO UPDATE SET attempts = a.attempts + 1, last_attempt_at = clock_timestamp()
RETURNING conversation_handle, message_sequence_number, attempts, last_error, failures, transient_failures;

-- Records why the last attempt of these messages failed (autocommit). $4: the
-- environment's fault (a transient failure), whose attempt is given back; otherwise
-- the message's, which keeps counting.
-- name: note_failure
UPDATE sbworker.message_attempt a
   SET attempts = CASE WHEN $4 THEN greatest(a.attempts - 1, 0) ELSE a.attempts END,
       failures = a.failures + CASE WHEN $4 THEN 0 ELSE 1 END,
       last_error = CASE WHEN $4 THEN a.last_error ELSE $3 END,
       transient_failures = a.transient_failures + CASE WHEN $4 THEN 1 ELSE 0 END,
       last_transient_error = CASE WHEN $4 THEN $3 ELSE a.last_transient_error END
  FROM unnest($1::uuid[], $2::bigint[]) AS k(h, s)
 WHERE a.conversation_handle = k.h AND a.message_sequence_number = k.s;

-- Inside the receiving transaction (sent with its COMMIT): the messages are done,
-- forget their attempts.
-- name: forget_attempts
DELETE FROM sbworker.message_attempt a
 USING unnest($1::uuid[], $2::bigint[]) AS k(h, s)
 WHERE a.conversation_handle = k.h AND a.message_sequence_number = k.s;

-- Inside the receiving transaction: keep a diverted message.
-- name: dead_letter
INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id,
    conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10);

-- Whether a queue is enabled, how many messages wait on it, and whether the broker's
-- poison-message detection is on for it (no row: no such queue).
-- name: queue_state
SELECT enabled, messages, poison_handling FROM sb.queue_state($1);

-- Whether queue $1 has work for a supervisor with no readers: messages waiting, or the
-- queue disabled (no row, no such queue: true, so the supervisor looks and says so).
-- name: queue_has_work
SELECT coalesce(bool_or(messages > 0 OR NOT enabled), true) FROM sb.queue_state($1);

-- The most readers the database allows on queue $1 across every worker, 0 for no limit
-- (no row: no such queue). Not prepared: an install before sb.queue_max_readers has no
-- such function (42883), read as no limit.
-- name: queue_max_readers
SELECT sb.queue_max_readers($1);

-- Reader slot $2 of queue $1, if free: a session-level advisory lock on this session's
-- connection (held across transactions, until unlocked or the connection ends), keyed by
-- a hash of the queue's name and the slot. One slot a statement, tried in turn by the
-- caller: a LIMIT does not bound how many rows a locking function runs on ("Advisory
-- Locks").
-- name: take_reader_slot
SELECT pg_try_advisory_lock(hashtext('sbworker.reader:' || $1::text), $2::int);

-- name: free_reader_slot
SELECT pg_advisory_unlock(hashtext('sbworker.reader:' || $1::text), $2::int);

-- Inside the calculation's transaction: claims a roster version of a key; a row comes
-- back unless an older version than one answered before (superseded). The same version
-- again is claimed: it is a repair (the sweep's, after its answer was lost or set aside
-- on the data side) or a replay, and must be computed again, not answered as superseded,
-- or its key would never get a result. The conflicting row is locked either way, until
-- the transaction ends.
-- name: claim_version
INSERT INTO sbworker.answered_version AS a (dienstverband_id, periode_id, versie) VALUES ($1, $2, $3)
    ON CONFLICT (dienstverband_id, periode_id)
    DO UPDATE SET versie = EXCLUDED.versie, answered_at = clock_timestamp() WHERE a.versie <= EXCLUDED.versie
RETURNING versie;

-- The collector (broker/postgres/003_calculation.sql). --------------------------------

-- name: store_antwoord
SELECT rekenserver.sla_antwoord_op($1, $2, $3, $4, $5, $6, $7, $8, $9::text[]::numeric[], $10, $11::text::jsonb);

-- The same against an install of the release before (workers are upgraded first): its
-- function takes no warnings yet.
-- name: store_antwoord_v1
SELECT rekenserver.sla_antwoord_op($1, $2, $3, $4, $5, $6, $7, $8, $9::text[]::numeric[], $10);

-- What the installed functions take (read on the side connection before the first use,
-- and again after a minute: a statement that fails inside the worker's transaction would
-- take the transaction with it): the collector's store with warnings, the heartbeat
-- with the contract version (a later release may add parameters: at least these).
-- name: installed_arities
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'rekenserver' AND p.proname = 'sla_antwoord_op' AND p.pronargs >= 11),
       EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'sbworker' AND p.proname = 'heartbeat' AND p.pronargs >= 8),
       EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'sb' AND p.proname = 'receive_marking'),
       EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                WHERE n.nspname = 'sb' AND p.proname = 'note_rollback' AND p.pronargs = 2);

-- name: record_fout
SELECT rekenserver.noteer_fout($1, $2, $3);

-- name: record_request_fout
SELECT rekenserver.noteer_fout($1, $2, $3, true);

-- name: dialog_idle
SELECT rekenserver.dialoog_stil($1);

-- The side connection's writes (attempt counts, failure notes) need not wait for the
-- WAL flush: a lost count after a server crash only gives an attempt back.
-- name: side_async_commit
SET synchronous_commit = off;

-- The side connection listens on a queue's channel (its name from `channel`: an
-- identifier, so filled in, not a parameter).
-- name: listen
LISTEN {channel};

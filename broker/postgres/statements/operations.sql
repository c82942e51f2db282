-- The statements of `sbworker status` and `sbworker dead-letter` (crates/core/src/ops/), and the
-- worker's heartbeat (crates/core/src/broker/postgres/). Parameters are $1, $2, ... as in the Rust
-- calls. The functions are in 007_operations.sql.

-- $1 minutes counted as recent (retries), $2 minutes after which a key is stale.
-- name: status_report
SELECT sbworker.status_report($1, $2)::text;

-- $1 diverted at or after (NULL: any time), $2 at most this many.
-- name: dead_letters
SELECT id, queue, service_name, far_service, message_type_name, message_body, attempts, reason,
       to_char(dead_lettered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replays,
       to_char(replayed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replayed_by, replay_handle
  FROM sbworker.dead_letters($1::text::timestamptz, $2);

-- $1 the id.
-- name: dead_letter
SELECT id, queue, service_name, far_service, message_type_name, message_body, attempts, reason,
       to_char(dead_lettered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replays,
       to_char(replayed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replayed_by, replay_handle
  FROM sbworker.dead_letter($1);

-- $1 the id, $2 who replays, $3 leave an entry replayed already alone (NULL back).
-- name: replay
SELECT sbworker.replay_dead_letter($1, $2, $3);

-- A calculation side's dead letter $1 whose key the roster side sent again on dialog $3,
-- marked replayed by $2 (with $4, unless replayed meanwhile: false).
-- name: note_replayed
SELECT sbworker.note_replayed($1, $2, $3, $4);

-- The roster side sends a key again, at its current version ($1 dienstverband, $2
-- periode): the dialog's handle, NULL when nothing was sent.
-- name: send_key
SELECT rekenserver.stuur_vraag($1, $2);

-- $1 diverted before, $2 batch size; returns how many were deleted.
-- name: purge
SELECT sbworker.purge_dead_letters($1::text::timestamptz, $2);

-- A page of dead letters: $1 queue, $2 text in the reason, $3 replayed (each NULL: any),
-- $4 no id above (NULL: none), $5 at most this many, $6 this letter only (NULL: any).
-- name: dead_letter_page
SELECT id, queue, service_name, far_service, message_type_name, message_body, attempts, reason,
       to_char(dead_lettered_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replays,
       to_char(replayed_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), replayed_by, replay_handle
  FROM sbworker.dead_letter_page($1, $2, $3, $4, $5, $6);

-- How many the filter picks, the highest id and the ids' sum: $1..$4 as dead_letter_page,
-- $5 as its $6.
-- name: dead_letter_count
SELECT letters, last_id, id_sum FROM sbworker.dead_letter_count($1, $2, $3, $4, $5);

-- The confirmed set deleted: $1..$4 as dead_letter_page, $5 the count confirmed, $6 the
-- filter as shown (for the action log), $7 this letter only, $8 the sum of the ids
-- confirmed; how many.
-- name: purge_matching
SELECT sbworker.purge_dead_letters_matching($1, $2, $3, $4, $5, $6, $7, $8);

-- $1 the action, $2 what it acted on, $3 how many letters.
-- name: note_action
SELECT sbworker.note_action($1, $2, $3);

-- $1 at most this many.
-- name: actions
SELECT id, to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"'), who, action, detail, letters
  FROM sbworker.actions($1);

-- $1 minutes back from now.
-- name: rates
SELECT minutes_ago, answered, failed, p50_ms, p95_ms FROM sbworker.rates($1);

-- $1 instance, $2 host, $3 pid, $4 version, $5 started, $6 queues (JSON text), $7 interval (ms).
-- name: heartbeat
SELECT sbworker.heartbeat($1, $2, $3, $4, $5, $6::text::jsonb, $7, $8);

-- The same against an install of the release before (workers are upgraded first): its
-- heartbeat takes no contract version yet.
-- name: heartbeat_v1
SELECT sbworker.heartbeat($1, $2, $3, $4, $5, $6::text::jsonb, $7);

-- $1 instance.
-- name: heartbeat_end
SELECT sbworker.heartbeat_end($1);

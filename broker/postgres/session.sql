-- The statements the PostgreSQL transport (src/broker/postgres.rs) sends, one per
-- "-- name:" section. Parameters are $1, $2, ... as in the Rust calls.

-- name: channel
SELECT sb.channel($1);

-- name: receive
SELECT message_id, conversation_group_id, conversation_handle, message_sequence_number,
       message_type_name, message_body, service_name, service_contract_name
  FROM sb.receive($1, $2, $3);

-- name: get_conversation_group
SELECT sb.get_conversation_group($1);

-- name: begin_dialog
SELECT sb.begin_dialog($1, $2, $3, $4, $5);

-- name: send
SELECT sb.send($1, $2, $3);

-- name: end_conversation
SELECT sb.end_conversation($1, $2, $3);

-- name: move_conversation
SELECT sb.move_conversation($1, $2);

-- name: note_rollback
SELECT sb.note_rollback($1);

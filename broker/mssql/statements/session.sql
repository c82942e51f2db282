-- The T-SQL statements the SQL Server transport (crates/core/src/broker/mssql.rs) sends, one per
-- "-- name:" section. Parameters are @P1, @P2, ... as tiberius binds them. {queue} and
-- {message_type} are identifiers the transport bracket-quotes (T-SQL takes no
-- parameters there); everything else is a parameter. Transactions go through
-- tiberius's transaction manager requests, never through these statements.

-- name: session_init
SET XACT_ABORT ON
SET NOCOUNT ON
SET ANSI_NULLS ON
SET ANSI_PADDING ON
SET ANSI_WARNINGS ON
SET ARITHABORT ON
SET CONCAT_NULL_YIELDS_NULL ON
SET QUOTED_IDENTIFIER ON
SET NUMERIC_ROUNDABORT OFF

-- name: receive
WAITFOR (RECEIVE TOP (@P1) conversation_group_id, conversation_handle, message_sequence_number,
                 message_type_name, message_body, service_name, service_contract_name
           FROM {queue}), TIMEOUT @P2

-- A retry of one group. While another session holds the group, SQL Server may wait for
-- its lock rather than return (the TIMEOUT bounds the wait for messages, not for a lock;
-- the RECEIVE page does not say): the lock wait is bounded to 1 s, after which error 1222
-- says another reader has the group and this one goes on with the others. Sent as an
-- RPC (sp_executesql), the SET is restored when the batch returns (the SET Statements
-- page); the last line, and lock_timeout_reset after an error that skips it, reset it
-- anyway, for a client that sends the batch as it is.
-- name: receive_group
SET LOCK_TIMEOUT 1000;
WAITFOR (RECEIVE TOP (@P1) conversation_group_id, conversation_handle, message_sequence_number,
                 message_type_name, message_body, service_name, service_contract_name
           FROM {queue} WHERE conversation_group_id = @P3), TIMEOUT @P2;
SET LOCK_TIMEOUT -1

-- name: lock_timeout_reset
SET LOCK_TIMEOUT -1

-- name: receive_conversation
RECEIVE conversation_group_id, conversation_handle, message_sequence_number,
        message_type_name, message_body, service_name, service_contract_name
   FROM {queue} WHERE conversation_handle = @P1

-- name: send
SEND ON CONVERSATION @P1 MESSAGE TYPE {message_type} (@P2)

-- name: send_empty
SEND ON CONVERSATION @P1 MESSAGE TYPE {message_type}

-- name: end_conversation
END CONVERSATION @P1

-- name: end_conversation_with_error
END CONVERSATION @P1 WITH ERROR = @P2 DESCRIPTION = @P3

-- name: move_conversation
MOVE CONVERSATION @P1 TO @P2

-- name: get_conversation_group
DECLARE @group uniqueidentifier;
WAITFOR (GET CONVERSATION GROUP @group FROM {queue}), TIMEOUT @P1;
SELECT @group AS conversation_group_id

-- name: count_attempts
EXEC sbworker.count_attempts @queue = @P1, @keys = @P2

-- name: note_failure
EXEC sbworker.note_failure @keys = @P1, @error = @P2, @transient = @P3

-- name: forget_attempts
EXEC sbworker.forget_attempts @keys = @P1

-- name: dead_letter
EXEC sbworker.set_aside @queue = @P1, @service = @P2, @contract = @P3, @group = @P4, @handle = @P5, @seq = @P6,
     @type = @P7, @body = @P8, @attempts = @P9, @reason = @P10

-- name: claim_version
EXEC sbworker.claim_version @dv = @P1, @periode = @P2, @versie = @P3

-- name: queue_state
EXEC sbworker.queue_state @queue = @P1

-- An idle supervisor's wait for work (optional/activation.sql): up to @P1 of SQL Server's
-- event notifications (QUEUE_ACTIVATION: EventNotification messages whose body is the
-- EVENT_INSTANCE naming the queue; EndDialog or Error when an event notification's
-- conversation ends), waiting up to @P2 ms. Outside any transaction, on the side
-- connection: a notification is taken as it is read (one lost costs an idle queue one
-- look later, never a message), and several worker processes may wait on the one queue.
-- name: wait_for_activation
WAITFOR (RECEIVE TOP (@P1) conversation_handle, message_type_name, message_body
           FROM sbworker.activation), TIMEOUT @P2

-- A reader slot among the queue's first @P2, held by this session's connection (the
-- working one) until freed: its number, NULL when all are held.
-- name: take_reader_slot
EXEC sbworker.reader_slot @queue = @P1, @slots = @P2

-- name: free_reader_slot
EXEC sbworker.reader_slot_free @queue = @P1, @slot = @P2

-- name: store_antwoord
EXEC Rekenserver.sla_antwoord_op @handle = @P1, @antwoord = @P2

-- name: record_fout
EXEC Rekenserver.noteer_fout @handle = @P1, @melding = @P2, @herstelbaar = @P3

-- A Fout (or an unreadable answer) answers one request: the oldest open on the dialog.
-- name: record_request_fout
EXEC Rekenserver.noteer_fout @handle = @P1, @melding = @P2, @herstelbaar = @P3, @eerste = 1

-- A reused dialog's DialogTimer: one row, whether the collector ends it.
-- name: dialog_idle
EXEC Rekenserver.dialoog_stil @handle = @P1

-- The worker's heartbeat (06_operations.sql): @P1 instance, @P2 host, @P3 pid, @P4
-- version, @P5 started (seconds since the Unix epoch), @P6 queues (JSON), @P7 how often
-- it beats (ms).
-- name: heartbeat
EXEC sbworker.heartbeat @instance = @P1, @host = @P2, @pid = @P3, @version = @P4, @started_unix = @P5, @queues = @P6, @interval_ms = @P7, @contract_versie = @P8

-- The same against an install of the release before (workers are upgraded first): its
-- procedure has no @contract_versie yet (8145).
-- name: heartbeat_v1
EXEC sbworker.heartbeat @instance = @P1, @host = @P2, @pid = @P3, @version = @P4, @started_unix = @P5, @queues = @P6, @interval_ms = @P7

-- name: heartbeat_end
EXEC sbworker.heartbeat_end @instance = @P1

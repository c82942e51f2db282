"""The conversation steps of Microsoft's single-database Service Broker tutorial, and the
forms of the RECEIVE, SEND, GET CONVERSATION GROUP and BEGIN CONVERSATION TIMER reference pages, sent through
python-tds (a client we did not write) to the emulator, in the documents' own statement
forms (our own names and texts).

Run by tests/emulator_clients.rs with: python3 pytds_tutorial.py PORT USER PASSWORD. The
message types, contract, queues and services exist already (the test made them). Prints
what each step returned as one JSON object on stdout.
"""

import json
import sys

import pytds

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}


def rows(cur):
    """Every result set of the last batch, as lists of strings (bytes in hex)."""

    def text(v):
        if v is None:
            return None
        return v.hex() if isinstance(v, (bytes, bytearray)) else str(v)

    sets = []
    while True:
        if cur.description is not None:
            sets.append([[text(v) for v in r] for r in cur.fetchall()])
        if not cur.nextset():
            return sets


with pytds.connect(
    "127.0.0.1", database="payroll", user=user, password=password, port=port, autocommit=True, timeout=30
) as conn:
    with conn.cursor() as cur:
        # Step 1: begin a conversation and send a request, in one transaction.
        cur.execute(
            """
DECLARE @InitDlgHandle UNIQUEIDENTIFIER;
DECLARE @RequestMsg NVARCHAR(100);

BEGIN TRANSACTION;

BEGIN DIALOG @InitDlgHandle
     FROM SERVICE [//sbworker/Tutorial/InitiatorService]
     TO SERVICE N'//sbworker/Tutorial/TargetService'
     ON CONTRACT [//sbworker/Tutorial/Contract]
     WITH ENCRYPTION = OFF;

SELECT @RequestMsg = N'<RequestMsg>A request for the target</RequestMsg>';

SEND ON CONVERSATION (@InitDlgHandle)
     MESSAGE TYPE [//sbworker/Tutorial/RequestMessage]
     (@RequestMsg);

SELECT @RequestMsg AS SentRequestMsg;

COMMIT TRANSACTION;
"""
        )
        out["step1"] = rows(cur)

        # Step 2: the target receives the request into variables, checks its type with
        # IF, replies and ends its side inside a BEGIN … END block.
        cur.execute(
            """
DECLARE @RecvReqDlgHandle UNIQUEIDENTIFIER;
DECLARE @RecvReqMsg NVARCHAR(100);
DECLARE @RecvReqMsgName sysname;

BEGIN TRANSACTION;

WAITFOR
( RECEIVE TOP(1)
    @RecvReqDlgHandle = conversation_handle,
    @RecvReqMsg = message_body,
    @RecvReqMsgName = message_type_name
  FROM TutorialTargetQueue
), TIMEOUT 10000;

SELECT @RecvReqMsg AS ReceivedRequestMsg;

IF @RecvReqMsgName =
   N'//sbworker/Tutorial/RequestMessage'
BEGIN
     DECLARE @ReplyMsg NVARCHAR(100);
     SELECT @ReplyMsg =
     N'<ReplyMsg>A reply for the initiator</ReplyMsg>';

     SEND ON CONVERSATION @RecvReqDlgHandle
          MESSAGE TYPE
          [//sbworker/Tutorial/ReplyMessage]
          (@ReplyMsg);

     END CONVERSATION @RecvReqDlgHandle;
END

SELECT @ReplyMsg AS SentReplyMsg;

COMMIT TRANSACTION;
"""
        )
        out["step2"] = rows(cur)

        # Step 3: the initiator receives the reply and ends its side.
        cur.execute(
            """
DECLARE @RecvReplyMsg NVARCHAR(100);
DECLARE @RecvReplyDlgHandle UNIQUEIDENTIFIER;

BEGIN TRANSACTION;

WAITFOR
( RECEIVE TOP(1)
    @RecvReplyDlgHandle = conversation_handle,
    @RecvReplyMsg = message_body
  FROM TutorialInitiatorQueue
), TIMEOUT 10000;

END CONVERSATION @RecvReplyDlgHandle;

SELECT @RecvReplyMsg AS ReceivedReplyMsg;

COMMIT TRANSACTION;
"""
        )
        out["step3"] = rows(cur)

        # The reference pages: SEND on two conversations at once; GET CONVERSATION GROUP
        # then RECEIVE of that group; RECEIVE … INTO a table variable, then SELECT from it;
        # an IF whose condition does not hold takes its ELSE.
        cur.execute(
            """
DECLARE @a UNIQUEIDENTIFIER, @b UNIQUEIDENTIFIER;
BEGIN DIALOG @a FROM SERVICE [//sbworker/Tutorial/InitiatorService]
    TO SERVICE '//sbworker/Tutorial/TargetService' ON CONTRACT [//sbworker/Tutorial/Contract];
BEGIN DIALOG @b FROM SERVICE [//sbworker/Tutorial/InitiatorService]
    TO SERVICE '//sbworker/Tutorial/TargetService' ON CONTRACT [//sbworker/Tutorial/Contract];
SEND ON CONVERSATION (@a, @b) MESSAGE TYPE [//sbworker/Tutorial/RequestMessage] (N'<Both/>');
SELECT @a AS a, @b AS b;
"""
        )
        initiators = rows(cur)[0][0]
        out["initiators"] = initiators

        cur.execute(
            """
DECLARE @conversation_group_id UNIQUEIDENTIFIER;
DECLARE @procTable TABLE(
     group_id UNIQUEIDENTIFIER,
     handle UNIQUEIDENTIFIER,
     message_sequence_number BIGINT,
     service_name NVARCHAR(512),
     service_contract_name NVARCHAR(256),
     message_type_name NVARCHAR(256),
     validation NCHAR,
     message_body VARBINARY(MAX));

BEGIN TRANSACTION;
WAITFOR (
    GET CONVERSATION GROUP @conversation_group_id FROM TutorialTargetQueue
), TIMEOUT 10000;

RECEIVE TOP (1)
    conversation_group_id,
    conversation_handle,
    message_sequence_number,
    service_name,
    service_contract_name,
    message_type_name,
    validation,
    message_body
FROM TutorialTargetQueue
INTO @procTable
WHERE conversation_group_id = @conversation_group_id;

SELECT @conversation_group_id AS got_group;
SELECT * FROM @procTable;
SELECT handle, message_body FROM @procTable;

IF @conversation_group_id IS NULL
    SELECT N'no group' AS branch
ELSE
    SELECT N'a group' AS branch;
COMMIT TRANSACTION;
"""
        )
        out["table"] = rows(cur)

        # The second request, both initiators and the first target ended WITH CLEANUP.
        cur.execute(
            """
DECLARE @h UNIQUEIDENTIFIER;
RECEIVE TOP (1) @h = conversation_handle FROM TutorialTargetQueue;
END CONVERSATION @h WITH CLEANUP;
"""
        )
        received = out["table"][2][0][0]
        for h in initiators + [received]:
            cur.execute("END CONVERSATION %s WITH CLEANUP", (h,))

        # The RECEIVE page's examples I and J: a CASE in the column list (the body as
        # xml when it is XML, otherwise NULL or a stand-in), and into a table variable.
        cur.execute(
            """
DECLARE @d UNIQUEIDENTIFIER;
BEGIN DIALOG @d FROM SERVICE [//sbworker/Tutorial/InitiatorService]
    TO SERVICE '//sbworker/Tutorial/TargetService' ON CONTRACT [//sbworker/Tutorial/Contract]
    WITH ENCRYPTION = OFF;
SEND ON CONVERSATION @d MESSAGE TYPE [//sbworker/Tutorial/RequestMessage] (N'<Expense>42</Expense>');
END CONVERSATION @d;
"""
        )
        cur.execute(
            """
DECLARE @receiveTable TABLE(
    message_type sysname,
    message_body xml,
    message_dialog uniqueidentifier);
WAITFOR
    (RECEIVE
        message_type_name,
        CASE
            WHEN validation = 'X' THEN CAST(message_body AS XML)
            ELSE CAST(N'<none/>' AS XML)
        END,
        conversation_handle
    FROM TutorialTargetQueue
    INTO @receiveTable
    ), TIMEOUT 10000;
SELECT message_type, message_body FROM @receiveTable;
SELECT message_dialog FROM @receiveTable;
"""
        )
        case_rows = rows(cur)
        out["case_into"] = case_rows[0]
        # The target ends too (the initiator has): the conversation is gone.
        for (h,) in case_rows[1][:1]:
            cur.execute("END CONVERSATION %s", (h,))

        # BEGIN CONVERSATION TIMER as its reference page writes it, then set again to a
        # timer due at once: the DialogTimer arrives on the initiator's own queue.
        cur.execute(
            """
DECLARE @dialog_handle UNIQUEIDENTIFIER;
BEGIN DIALOG @dialog_handle FROM SERVICE [//sbworker/Tutorial/InitiatorService]
    TO SERVICE '//sbworker/Tutorial/TargetService' ON CONTRACT [//sbworker/Tutorial/Contract]
    WITH ENCRYPTION = OFF;
-- @dialog_handle is of type uniqueidentifier and
-- contains a valid conversation handle.
BEGIN CONVERSATION TIMER (@dialog_handle)
TIMEOUT = 120 ;
BEGIN CONVERSATION TIMER (@dialog_handle) TIMEOUT = 0;
SELECT @dialog_handle;
"""
        )
        timer_dialog = rows(cur)[0][0][0]
        cur.execute(
            "WAITFOR (RECEIVE TOP (10) message_type_name, conversation_handle FROM TutorialInitiatorQueue), TIMEOUT 10000"
        )
        out["timer"] = {"dialog": timer_dialog, "received": rows(cur)}
        cur.execute("END CONVERSATION %s WITH CLEANUP", (timer_dialog,))

        # One handle twice in one SEND is refused, and nothing is sent.
        try:
            cur.execute(
                "SEND ON CONVERSATION (%s, %s) MESSAGE TYPE [//sbworker/Tutorial/RequestMessage] (N'<Twice/>')",
                (initiators[0], initiators[0]),
            )
            out["twice"] = "sent"
        except pytds.tds_base.Error as e:  # noqa: BLE001 - reported to the test
            out["twice"] = str(e)

        # Anything else still fails loudly.
        try:
            cur.execute("DECLARE @n INT = 1; IF @n < 2 SELECT @n")
            out["refused"] = "ran"
        except pytds.tds_base.Error as e:  # noqa: BLE001 - reported to the test
            out["refused"] = str(e)

print(json.dumps(out))

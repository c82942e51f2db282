"""A second TDS client, not ours: python-tds talks to the Service Broker emulator.

Run by tests/emulator_clients.rs with: python3 pytds_client.py PORT USER PASSWORD.
Logs in, begins a dialog, sends a message, receives it back with every queue column,
reads it again as XML, cancels a waiting RECEIVE (an ATTENTION), ends with CLEANUP,
and prints what it saw as one JSON object on stdout.
"""

import json
import sys
import uuid

import pytds
import pytds.tds_base

port, user, password = int(sys.argv[1]), sys.argv[2], sys.argv[3]
out = {}
BODY = pytds.Binary('<Hallo xmlns="urn:test">wereld</Hallo>'.encode("utf-8"))  # bytes alone would go as nvarchar

with pytds.connect(
    "127.0.0.1", database="payroll", user=user, password=password, port=port, autocommit=True, timeout=30
) as conn:
    with conn.cursor() as cur:
        # As the worker does: no row counts, so each statement's DONE is not a result.
        cur.execute("SET NOCOUNT ON; SET XACT_ABORT ON")
        # A dialog from the data service to the calculation service, one message on it.
        cur.execute(
            """
            DECLARE @h uniqueidentifier;
            BEGIN DIALOG CONVERSATION @h
                FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                WITH ENCRYPTION = OFF, LIFETIME = 600;
            SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (%s);
            SELECT @h;
            """,
            (BODY,),
        )
        initiator = cur.fetchone()[0]
        out["initiator"] = str(initiator)

        # Received back on the target's queue, every column.
        cur.execute("WAITFOR (RECEIVE TOP (1) * FROM dbo.loonfactorberekening_reken), TIMEOUT 10000")
        columns = [d[0] for d in cur.description]
        row = cur.fetchone()
        out["columns"] = columns
        out["row"] = {
            c: (v.hex() if isinstance(v, (bytes, bytearray)) else str(v) if v is not None else None)
            for c, v in zip(columns, row)
        }
        out["types"] = {c: type(v).__name__ for c, v in zip(columns, row)}
        target = row[columns.index("conversation_handle")]

        # The target answers; the initiator reads the answer as XML and into variables.
        cur.execute(
            "SEND ON CONVERSATION %s MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Antwoord] (%s)",
            (target, BODY),
        )
        cur.execute(
            """
            DECLARE @type nvarchar(256), @seq bigint;
            WAITFOR (RECEIVE TOP (1) @type = message_type_name, @seq = message_sequence_number
                     FROM dbo.loonfactorberekening_data
                     WHERE conversation_handle = %s), TIMEOUT 10000;
            SELECT @type, @seq;
            """,
            (initiator,),
        )
        out["assigned"] = [str(v) for v in cur.fetchone()]
        cur.execute(
            "SEND ON CONVERSATION %s MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Antwoord] (%s)",
            (target, BODY),
        )
        cur.execute(
            "WAITFOR (RECEIVE TOP (1) CAST(message_body AS XML) AS body FROM dbo.loonfactorberekening_data), TIMEOUT 10000"
        )
        out["xml"] = cur.fetchone()[0]

        # Both sides go WITH CLEANUP.
        cur.execute("END CONVERSATION %s WITH CLEANUP", (target,))
        cur.execute("END CONVERSATION %s WITH CLEANUP", (initiator,))

        # The form of Microsoft's tutorial: the body an NVARCHAR variable (UTF-16LE, no
        # byte-order mark) into a WELL_FORMED_XML message type; received as sent.
        cur.execute(
            """
            DECLARE @h uniqueidentifier;
            DECLARE @msg nvarchar(100);
            BEGIN DIALOG CONVERSATION @h
                FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
                ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                WITH ENCRYPTION = OFF;
            SELECT @msg = N'<RequestMsg>Message for Target service: Zoë</RequestMsg>';
            SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@msg);
            SELECT @h;
            """
        )
        tutorial = cur.fetchone()[0]
        cur.execute(
            "WAITFOR (RECEIVE TOP (1) conversation_handle, message_body FROM dbo.loonfactorberekening_reken), TIMEOUT 10000"
        )
        handle, body = cur.fetchone()
        out["nvarchar_body"] = body.hex()
        # The same dialog, the body cast to xml and the handle in parentheses, as the
        # reference page writes SEND: SQL Server keeps xml as UTF-16LE with a mark.
        cur.execute(
            """
            DECLARE @msg nvarchar(100);
            SELECT @msg = N'<RequestMsg>As xml</RequestMsg>';
            SEND ON CONVERSATION (%s) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (CAST(@msg AS xml));
            """,
            (tutorial,),
        )
        cur.execute(
            "WAITFOR (RECEIVE TOP (1) message_body FROM dbo.loonfactorberekening_reken), TIMEOUT 10000"
        )
        out["xml_body"] = cur.fetchone()[0].hex()
        cur.execute("END CONVERSATION %s WITH CLEANUP", (handle,))
        cur.execute("END CONVERSATION %s WITH CLEANUP", (tutorial,))

        # The payroll hand-off as a tool of the shop's own would call it: a claim of a
        # period (nothing stored here: no rows, the columns as documented) and a
        # confirmation of a batch that does not exist (nothing confirmed).
        batch = uuid.uuid4()
        cur.execute(
            "EXEC Rekenserver.export_claim @periode = %s, @mode = %s, @lease_minutes = %s, @batch = %s",
            (202604, "lease", 15, batch),
        )
        out["export_columns"] = [d[0] for d in cur.description]
        out["export_rows"] = len(cur.fetchall())
        cur.execute("EXEC Rekenserver.export_ack @batch = %s", (batch,))
        out["export_confirmed"] = cur.fetchone()[0]

        # A RECEIVE waiting on an empty queue, cancelled by the client's timeout: python-tds
        # sends an ATTENTION and waits for the server's acknowledgement.
        try:
            slow = pytds.connect(
                "127.0.0.1", database="payroll", user=user, password=password, port=port, autocommit=True, timeout=1
            )
            with slow.cursor() as c2:
                try:
                    c2.execute("WAITFOR (RECEIVE * FROM dbo.loonfactorberekening_reken), TIMEOUT 60000")
                    out["cancel"] = "not cancelled"
                except pytds.tds_base.TimeoutError:
                    out["cancel"] = "timed out"
                # The same connection serves the next request after the cancel.
                c2.execute("SET NOCOUNT ON; DECLARE @x int = 41; SELECT @x = 42; SELECT @x")
                out["after_cancel"] = c2.fetchone()[0]
            slow.close()
        except Exception as e:  # noqa: BLE001 - reported to the test, which fails
            out["cancel_error"] = repr(e)

print(json.dumps(out))

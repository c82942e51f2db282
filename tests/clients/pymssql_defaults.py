"""An outside client with its default settings: pymssql (FreeTDS) against the emulator.

Run by tests/emulator_clients.rs with: python3 pymssql_defaults.py PORT USER PASSWORD STEP [VRAAG_FILE],
STEP being `tutorial` (no worker runs) or `worker` (a worker serves the calculation queue).
pymssql is used as its documentation shows, nothing tuned for the emulator: its login
settings, its own transaction (autocommit off), its parameters (written into the batch
as literals: a str as N'…', bytes as 0x…). Prints what it saw as one JSON object.
"""

import json
import sys

import pymssql

port, user, password, step = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = {}
BEGIN = """
DECLARE @h uniqueidentifier;
BEGIN DIALOG CONVERSATION @h
    FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
    TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
    ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
    WITH ENCRYPTION = OFF;
SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (%s);
SELECT @h;
"""
RECEIVE = """
WAITFOR (RECEIVE TOP (1) conversation_handle, message_type_name,
                 CAST(message_body AS NVARCHAR(MAX)) AS body
         FROM dbo.{queue}), TIMEOUT 10000
"""

conn = pymssql.connect(server="127.0.0.1", port=port, user=user, password=password)
cur = conn.cursor()
if step == "worker":
    # A round trip through the worker: a Vraag in, its Antwoord and EndDialog back.
    vraag = open(sys.argv[5], encoding="utf-8").read()
    cur.execute(BEGIN, (vraag,))
    initiator = cur.fetchone()[0]
    conn.commit()
    cur.execute(
        """WAITFOR (RECEIVE conversation_handle, message_type_name, CAST(message_body AS XML) AS body
                    FROM dbo.loonfactorberekening_data), TIMEOUT 30000"""
    )
    rows = cur.fetchall()
    out["answer_types"] = [r[1] for r in rows]
    out["answer_is_for_this_dialog"] = all(r[0] == initiator for r in rows)
    out["answer_root"] = (rows[0][2] or "")[:40] if rows else None
    cur.execute("END CONVERSATION %s", (initiator,))
    conn.commit()
    conn.close()
    print(json.dumps(out))
    sys.exit(0)

# The driver's own transaction is open: the tutorial's batch nests in it.
cur.execute("SELECT @@TRANCOUNT")
out["trancount_at_start"] = cur.fetchone()[0]

# Microsoft's single-database tutorial, its batch as written (BEGIN TRANSACTION …
# COMMIT), the body as a parameter: nvarchar, then varbinary (UTF-16 with a mark, as SQL
# Server keeps an xml value).
bodies = {"nvarchar": '<Hallo xmlns="urn:test">wereld</Hallo>'}
bodies["varbinary"] = b"\xff\xfe" + '<Hallo xmlns="urn:test">wereld, binair</Hallo>'.encode("utf-16-le")
out["sent"] = {}
for form, body in bodies.items():
    cur.execute("BEGIN TRANSACTION;" + BEGIN + "COMMIT TRANSACTION;", (body,))
    out["sent"][form] = str(cur.fetchone()[0])
    conn.commit()
out["received"] = []
for _ in bodies:
    cur.execute(RECEIVE.format(queue="loonfactorberekening_reken"))
    h, kind, text = cur.fetchone()
    out["received"].append(text)
    cur.execute("END CONVERSATION %s WITH CLEANUP", (h,))
    conn.commit()

# A body over 100 KB comes back whole.
big = "<Groot>" + "<Regel>héél veel tekst</Regel>" * 4000 + "</Groot>"
cur.execute(BEGIN, (big,))
cur.fetchone()
conn.commit()
cur.execute(RECEIVE.format(queue="loonfactorberekening_reken"))
h, kind, text = cur.fetchone()
out["big_roundtrip"] = text == big and len(big) > 100_000
cur.execute("END CONVERSATION %s WITH CLEANUP", (h,))
conn.commit()

# The driver's rollback: nothing stays queued.
cur.execute(BEGIN, (bodies["nvarchar"],))
cur.fetchone()
conn.rollback()
cur.execute("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken")
out["queued_after_rollback"] = cur.fetchone()[0]
conn.commit()

# A refused statement, then a working one on the same connection.
try:
    cur.execute("SELECT name FROM sys.service_queues")
    out["refused"] = None
except pymssql.Error as e:
    out["refused"] = e.args[0]
cur.execute("SELECT 1 AS one")
out["after_refusal"] = cur.fetchone()[0]
conn.commit()

# sp_executesql written in a batch, as scripts and ORMs send it (its parameters as
# pymssql writes them: literals), and the caller's variable as it was after it.
cur.execute(
    "DECLARE @n int = 7; "
    "EXEC sp_executesql N'SELECT @a AS a, @b AS b, @n AS n', N'@a int, @b nvarchar(10), @n int', "
    "@a = %d, @b = %s, @n = 9; SELECT @n AS n",
    (41, "x"),
)
out["executesql"] = list(cur.fetchone())
cur.nextset()
out["executesql_caller_n"] = cur.fetchone()[0]
conn.commit()

conn.close()
print(json.dumps(out))

"""pyodbc on Microsoft's ODBC Driver 18 against the emulator, with their default settings.

Run by tests/emulator_clients.rs with: python3 pyodbc_defaults.py DRIVER PORT USER PASSWORD [VRAAG_FILE];
DRIVER is the driver library (the one mssql-python bundles: the test installs no system
ODBC configuration, so the connection string names the library as `DRIVER={path}`).
With VRAAG_FILE (a worker serving the calculation queue) it sends that Vraag and reads
the worker's answer instead.
pyodbc as its documentation shows: autocommit off (its own transaction), parameters as
`?` (the driver sends sp_prepexec, each Python type as its SQL Server type: int, bigint,
bit, decimal, float, datetime2, date, uniqueidentifier, nvarchar, varbinary, and the
max types for long values), the driver's default `Encrypt=yes` with the emulator's
self-signed certificate trusted (`TrustServerCertificate=yes`). Prints what it saw as
one JSON object.
"""

import datetime
import decimal
import json
import sys
import uuid

import pyodbc

driver, port, user, password = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
out = {}
pwd = "{" + password.replace("}", "}}") + "}"
conn = pyodbc.connect(
    f"DRIVER={{{driver}}};SERVER=tcp:127.0.0.1,{port};UID={user};PWD={pwd};TrustServerCertificate=yes"
)
cur = conn.cursor()
BEGIN = """DECLARE @h uniqueidentifier;
BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
    TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
    ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (?);
SELECT @h;"""

if len(sys.argv) > 5:
    # A round trip through the worker: a Vraag in, its Antwoord and EndDialog back.
    vraag = open(sys.argv[5], encoding="utf-8").read()
    cur.execute(BEGIN, (vraag,))
    initiator = cur.fetchone()[0]
    conn.commit()
    cur.execute(
        """WAITFOR (RECEIVE conversation_handle, message_type_name, CAST(message_body AS XML)
                    FROM dbo.loonfactorberekening_data), TIMEOUT 30000"""
    )
    rows = cur.fetchall()
    out["answer_types"] = [r[1] for r in rows]
    out["answer_is_for_this_dialog"] = all(str(r[0]).lower() == str(initiator).lower() for r in rows)
    out["answer_root"] = (rows[0][2] or "")[:60] if rows else None
    cur.execute("END CONVERSATION ?", (initiator,))
    conn.commit()
    print(json.dumps(out))
    sys.exit(0)

cur.execute("SELECT @@TRANCOUNT")
out["trancount_at_start"] = cur.fetchone()[0]

# Every type pyodbc binds, sent as a parameter and read back unchanged.
values = {
    "int": 42,
    "bigint": 2**40,
    "bit": True,
    "decimal": decimal.Decimal("-1234.56"),
    "float": 0.1,
    "datetime2": datetime.datetime(2026, 4, 1, 8, 30, 15, 123000),
    "date": datetime.date(2026, 4, 1),
    "uniqueidentifier": uuid.UUID("12345678-1234-5678-1234-567812345678"),
    "nvarchar": "tekst é",
    "nvarchar(max)": "é" * 5000,
    "varbinary": b"\x00\x01\xff",
    "varbinary(max)": bytes(range(256)) * 40,
    "null": None,
}
out["types"] = {}
for name, v in values.items():
    cur.execute("SELECT ? AS v", (v,))
    got = cur.fetchone()[0]
    if isinstance(v, uuid.UUID):
        got = uuid.UUID(str(got))
    out["types"][name] = got == v or repr(got)[:80]
# A decimal and a date as text, as SQL Server's CAST writes them.
cur.execute("SELECT CAST(? AS NVARCHAR(40)), CAST(? AS NVARCHAR(40))", (decimal.Decimal("7.50"), datetime.date(2026, 4, 1)))
out["as_text"] = list(cur.fetchone())

# Microsoft's single-database tutorial with the body as a parameter: nvarchar, varbinary
# (UTF-16 with a byte-order mark) and xml (bound as SQL_SS_XML), each received back.
RECEIVE = """WAITFOR (RECEIVE TOP (1) conversation_handle, CAST(message_body AS NVARCHAR(MAX)) AS body
             FROM dbo.loonfactorberekening_reken), TIMEOUT 10000"""
out["received"] = []
for body, sql_type in [
    ('<Hallo xmlns="urn:test">wereld</Hallo>', None),
    (b"\xff\xfe" + "<Hallo>binair</Hallo>".encode("utf-16-le"), None),
    ("<Hallo>als xml</Hallo>", pyodbc.SQL_SS_XML),
]:
    # (A cursor of its own: pyodbc keeps input sizes for the cursor's later statements.)
    sending = conn.cursor()
    if sql_type is not None:
        sending.setinputsizes([(sql_type, 0, 0)])
    sending.execute("BEGIN TRANSACTION; " + BEGIN + " COMMIT TRANSACTION;", (body,))
    sending.fetchall()
    conn.commit()
    cur.execute(RECEIVE)
    h, text = cur.fetchone()
    out["received"].append(text)
    cur.execute("END CONVERSATION ? WITH CLEANUP", (h,))
    conn.commit()

# A body over 100 KB, sent as nvarchar(max) and read back whole.
big = "<Groot>" + "x" * 120_000 + "</Groot>"
cur.execute(BEGIN, (big,))
cur.fetchall()
conn.commit()
cur.execute(RECEIVE)
h, text = cur.fetchone()
out["big_roundtrip"] = text == big
cur.execute("END CONVERSATION ? WITH CLEANUP", (h,))
conn.commit()

# The driver's rollback: nothing stays queued.
cur.execute(BEGIN, ('<Hallo>terug</Hallo>',))
cur.fetchall()
conn.rollback()
cur.execute("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken")
out["queued_after_rollback"] = cur.fetchone()[0]
conn.commit()

# The driver's query timeout cancels a RECEIVE waiting on an empty queue (an ATTENTION),
# and the connection goes on. The driver's transaction, which holds a message sent
# before the wait, stays open (XACT_ABORT OFF, SQL Server's default): committed after the
# cancel, the message is there.
# (pyodbc applies a connection's timeout to the cursors made after it is set.)
conn.timeout = 1
waiting = conn.cursor()
waiting.execute(BEGIN, ("<Hallo>voor de cancel</Hallo>",))
waiting.fetchall()
try:
    waiting.execute("WAITFOR (RECEIVE TOP (1) * FROM dbo.loonfactorberekening_data), TIMEOUT 60000")
    waiting.fetchall()
    out["cancelled"] = None
except pyodbc.Error as e:
    out["cancelled"] = e.args[0]
conn.timeout = 0
cur.execute("SELECT @@TRANCOUNT")
out["trancount_after_cancel"] = cur.fetchone()[0]
conn.commit()
cur.execute("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken")
out["queued_after_cancel"] = cur.fetchone()[0]
cur.execute(RECEIVE)
h, _ = cur.fetchone()
cur.execute("END CONVERSATION ? WITH CLEANUP", (h,))
conn.commit()
cur.execute("SELECT 2")
out["after_cancel"] = cur.fetchone()[0]

# A refused statement, then a working one on the same connection.
try:
    cur.execute("SELECT * FROM sys.objects")
    out["refused"] = None
except pyodbc.Error as e:
    out["refused"] = "50100" in str(e)
conn.rollback()
cur.execute("SELECT 3")
out["after_refusal"] = cur.fetchone()[0]
conn.commit()
conn.close()
print(json.dumps(out))

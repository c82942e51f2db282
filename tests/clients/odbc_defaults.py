"""Microsoft's ODBC Driver 18 (bundled by mssql-python) against the emulator.

Run by tests/emulator_clients.rs with: python3 odbc_defaults.py PORT USER PASSWORD EXTRA [VRAAG_FILE];
with VRAAG_FILE (a worker serving the calculation queue) it sends that Vraag and reads
the worker's answer instead.
The driver as mssql-python sets it up: autocommit off (its own transaction),
parameters sent as sp_prepexec with unnamed values, strings as varchar or nvarchar. EXTRA
is appended to the connection string: `TrustServerCertificate=yes;`, the emulator's
certificate being self-signed (the driver's default `Encrypt=yes` stays).
Prints what it saw as one JSON object.
"""

import json
import sys

import mssql_python

port, user, password, extra = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
out = {}
# A password with ; and " is written in braces, as ODBC connection strings quote.
pwd = "{" + password.replace("}", "}}") + "}"
conn = mssql_python.connect(f"Server=tcp:127.0.0.1,{port};UID={user};PWD={pwd};{extra}")
cur = conn.cursor()
if len(sys.argv) > 5:
    vraag = open(sys.argv[5], encoding="utf-8").read()
    cur.execute(
        """DECLARE @h uniqueidentifier;
        BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
        SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (?);
        SELECT @h;""",
        (vraag,),
    )
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
cur.execute("SELECT ? AS i, ? AS s", (42, "tekst"))
out["params"] = list(cur.fetchone())
long = "é" * 5000
cur.execute("SELECT ? AS long", (long,))
out["long_roundtrip"] = cur.fetchone()[0] == long

SEND = """BEGIN TRANSACTION;
DECLARE @h uniqueidentifier;
BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
    TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
    ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (?);
COMMIT TRANSACTION;"""
# The body as it is kept: the driver sends an ASCII str as varchar, which SQL Server keeps
# as single bytes (read back with CAST(… AS NVARCHAR) it would not be the text).
RECEIVE = """WAITFOR (RECEIVE TOP (1) conversation_handle, message_body
             FROM dbo.loonfactorberekening_reken), TIMEOUT 10000"""
bodies = ['<Hallo xmlns="urn:test">wereld</Hallo>', b"\xff\xfe" + "<Hallo>binair</Hallo>".encode("utf-16-le")]
out["received"] = []
for body in bodies:
    cur.execute(SEND, (body,))
    conn.commit()
    cur.execute(RECEIVE)
    h, body = cur.fetchone()
    out["received"].append(bytes(body).hex())
    cur.execute("END CONVERSATION ? WITH CLEANUP", (h,))
    conn.commit()

# A value of 100,000 characters refused by a conversion: an ordinary error, and the
# connection goes on (the driver once lost it to an oversized error token).
try:
    cur.execute("END CONVERSATION ?", ("x" * 100000,))
    cur.fetchall()
    out["refused"] = None
except mssql_python.Error as e:
    # A short error naming the value's type, not the value.
    out["refused"] = "character string to uniqueidentifier" in str(e) and "xxxx" not in str(e) and len(str(e)) < 2500
conn.rollback()
cur.execute("SELECT 7")
out["after_refusal"] = cur.fetchone()[0]

# The driver's rollback: nothing stays queued.
cur.execute(SEND.replace("COMMIT TRANSACTION;", ""), (bodies[0],))
conn.rollback()
cur.execute("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken")
out["queued_after_rollback"] = cur.fetchone()[0]
conn.commit()
conn.close()
print(json.dumps(out))

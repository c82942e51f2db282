"""An outside client with its default settings: pymssql (FreeTDS) calls the procedures of
conversation reuse through the emulator.

Run by tests/emulator_clients.rs with: python3 pymssql_reuse.py PORT USER PASSWORD STEP HANDLE,
STEP being `fout` (Rekenserver.noteer_fout with @eerste = 1: a Fout that answers the oldest
request open on the dialog HANDLE) or `stil` (Rekenserver.dialoog_stil: whether the dialog
HANDLE has gone idle). pymssql writes its parameters into the batch as literals (a str as
N'…', a bool as 1 or 0) and works in its own transaction (autocommit off), which it commits. Prints what it
saw as one JSON object.
"""

import json
import sys

import pymssql

port, user, password, step, handle = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
out = {}
conn = pymssql.connect(server="127.0.0.1", port=port, user=user, password=password)
cur = conn.cursor()
if step == "fout":
    # @herstelbaar = 1 where the text alone would say 0: a dropped parameter shows.
    cur.execute(
        "EXEC Rekenserver.noteer_fout @handle = %s, @melding = %s, @herstelbaar = %s, @eerste = %s",
        (handle, "tijdblok (50012): ongeldig", True, True),
    )
    out["done"] = True
elif step == "stil":
    cur.execute("EXEC Rekenserver.dialoog_stil @handle = %s", (handle,))
    out["stil"] = bool(cur.fetchone()[0])
else:
    raise SystemExit(f"unknown step {step}")
conn.commit()
conn.close()
print(json.dumps(out))

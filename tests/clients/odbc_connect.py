"""Microsoft's ODBC Driver 18 (bundled by mssql-python) connecting with the encryption
a connection string sets, then one query.

Run by tests/emulator_clients.rs with: python3 odbc_connect.py PORT USER PASSWORD EXTRA; EXTRA
is appended to the connection string (`Encrypt=strict;ServerCertificate=…;`, or
`Encrypt=no;`). Prints what it saw as one JSON object.
"""

import json
import sys

import mssql_python

port, user, password, extra = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
pwd = "{" + password.replace("}", "}}") + "}"
conn = mssql_python.connect(f"Server=tcp:127.0.0.1,{port};UID={user};PWD={pwd};{extra}")
cur = conn.cursor()
cur.execute("SELECT 42 AS answer")
print(json.dumps({"answer": cur.fetchone()[0]}))
conn.close()

// tedious (npm) connecting with the encryption it is given, then one query.
//
// Run by tests/emulator_clients.rs with: node tedious_connect.js PORT USER PASSWORD ENCRYPT [CA_FILE];
// ENCRYPT is `strict` (TDS 8.0: TLS first, the certificate checked against CA_FILE, as
// tedious does in strict mode) or `false` (tedious offers no encryption).
// Prints what it saw as one JSON object.
const fs = require('fs');
const { Connection, Request } = require('tedious');

const [port, userName, password, mode, caFile] = [
  parseInt(process.argv[2], 10), process.argv[3], process.argv[4], process.argv[5], process.argv[6],
];
const options = { port, encrypt: mode === 'strict' ? 'strict' : false };
if (caFile) options.cryptoCredentialsDetails = { ca: fs.readFileSync(caFile, 'utf8') };
const conn = new Connection({ server: '127.0.0.1', authentication: { type: 'default', options: { userName, password } }, options });
conn.on('connect', (err) => {
  if (err) {
    console.log(JSON.stringify({ connect: String(err) }));
    process.exit(1);
  }
  let answer = null;
  const req = new Request('SELECT 42 AS answer', (e) => {
    console.log(JSON.stringify({ connect: 'ok', answer, error: e ? e.message : null }));
    conn.close();
  });
  req.on('row', (cols) => { answer = cols[0].value; });
  conn.execSql(req);
});
conn.connect();

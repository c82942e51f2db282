// tedious (npm) against the emulator, with its default settings: encryption on (the
// emulator's certificate trusted), its parameters (sp_executesql with @statement), its
// request timeout cancelling a waiting RECEIVE.
//
// Run by tests/emulator_clients.rs with: node tedious_defaults.js PORT USER PASSWORD [VRAAG_FILE];
// with VRAAG_FILE (a worker serving the calculation queue) it sends that Vraag and reads
// the worker's answer instead.
// Prints what it saw as one JSON object.
const { Connection, Request, TYPES } = require('tedious');

const [port, userName, password] = [parseInt(process.argv[2], 10), process.argv[3], process.argv[4]];
const conn = new Connection({
  server: '127.0.0.1',
  authentication: { type: 'default', options: { userName, password } },
  options: { port, trustServerCertificate: true },
});
const out = {};

function run(sql, params, timeout) {
  return new Promise((resolve) => {
    const rows = [];
    const req = new Request(sql, (err) => resolve({ err: err ? err.message : null, number: err ? err.number : null, rows }));
    if (timeout) req.setTimeout(timeout);
    for (const [n, t, v] of params || []) req.addParameter(n, t, v);
    req.on('row', (cols) => rows.push(cols.map((c) => (Buffer.isBuffer(c.value) ? c.value.toString('hex') : c.value))));
    conn.execSql(req);
  });
}

function transaction(f) {
  return new Promise((resolve) => conn.beginTransaction(async (err) => {
    if (err) return resolve(String(err));
    await f();
    conn.rollbackTransaction((e) => resolve(e ? String(e) : 'rolled back'));
  }));
}

const BEGIN = `DECLARE @h uniqueidentifier;
BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
  TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
  ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@body);
SELECT @h AS h;`;
const RECEIVE = `WAITFOR (RECEIVE TOP (1) conversation_handle, CAST(message_body AS NVARCHAR(MAX)) AS body
  FROM dbo.loonfactorberekening_reken), TIMEOUT 10000`;

conn.on('connect', async (err) => {
  if (err) {
    console.log(JSON.stringify({ connect: String(err) }));
    process.exit(0);
  }
  out.connect = 'ok';
  if (process.argv[5]) {
    const vraag = require('fs').readFileSync(process.argv[5], 'utf8');
    const sent = await run(BEGIN, [['body', TYPES.NVarChar, vraag]]);
    const initiator = sent.rows[0][0];
    const got = await run(`WAITFOR (RECEIVE conversation_handle, message_type_name, CAST(message_body AS XML)
      FROM dbo.loonfactorberekening_data), TIMEOUT 30000`, []);
    out.answer_types = got.rows.map((r) => r[1]);
    out.answer_is_for_this_dialog = got.rows.every((r) => String(r[0]).toLowerCase() === String(initiator).toLowerCase());
    out.answer_root = got.rows.length ? String(got.rows[0][2]).slice(0, 60) : got.err;
    await run('END CONVERSATION @h', [['h', TYPES.UniqueIdentifier, initiator]]);
    console.log(JSON.stringify(out));
    conn.close();
    return;
  }
  out.types = (await run('SELECT 1 AS one, @@TRANCOUNT AS t', [])).rows[0];
  out.params = (await run('SELECT @a AS a, @b AS b', [['a', TYPES.Int, 42], ['b', TYPES.NVarChar, 'tekst']])).rows[0];
  // The tutorial's steps with the body as a parameter: nvarchar, varbinary, and a body
  // over 100 KB; each read back with CAST(message_body AS NVARCHAR(MAX)).
  const big = '<Groot>' + '<Regel>héél veel tekst</Regel>'.repeat(4000) + '</Groot>';
  const bodies = [
    [TYPES.NVarChar, '<Hallo xmlns="urn:test">wereld</Hallo>'],
    [TYPES.VarBinary, Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from('<Hallo>binair</Hallo>', 'utf16le')])],
    [TYPES.NVarChar, big],
  ];
  out.received = [];
  for (const [type, body] of bodies) {
    const sent = await run(BEGIN, [['body', type, body]]);
    if (sent.err) { out.received.push(`send: ${sent.err}`); continue; }
    const got = await run(RECEIVE, []);
    const text = got.rows.length ? got.rows[0][1] : got.err;
    out.received.push(text === big ? 'the big body, whole' : text);
    if (got.rows.length) await run('END CONVERSATION @h WITH CLEANUP', [['h', TYPES.UniqueIdentifier, got.rows[0][0]]]);
  }
  // tedious's transaction, rolled back: nothing stays queued.
  out.rollback = await transaction(() => run(BEGIN, [['body', TYPES.NVarChar, '<a/>']]));
  out.queued_after_rollback = (await run('SELECT COUNT(*) FROM dbo.loonfactorberekening_reken', [])).rows[0][0];
  // The request timeout cancels a waiting RECEIVE; the connection goes on.
  const waited = await run('WAITFOR (RECEIVE TOP (1) message_body FROM dbo.loonfactorberekening_reken), TIMEOUT 30000', [], 1000);
  out.cancelled = waited.err;
  out.after_cancel = (await run('SELECT 2 AS two', [])).rows[0];
  // A refused statement, then a working one.
  out.refused = (await run('SELECT name FROM sys.service_queues', [])).number;
  out.after_refusal = (await run('SELECT 3 AS three', [])).rows[0];
  console.log(JSON.stringify(out));
  conn.close();
});
conn.on('error', (e) => console.log(JSON.stringify({ error: String(e) })));
conn.connect();

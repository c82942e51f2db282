// The `mssql` package (npm, on tedious) against the emulator, with its default
// settings (its pool, which checks each connection with a query; encryption on, the
// emulator's certificate trusted): a parameterised query, a transaction rolled back.
//
// Run by tests/emulator_clients.rs with: node mssql_npm_defaults.js PORT USER PASSWORD.
// Prints what it saw as one JSON object.
const sql = require('mssql');

(async () => {
  const [port, user, password] = [parseInt(process.argv[2], 10), process.argv[3], process.argv[4]];
  const out = {};
  try {
    const pool = await sql.connect({ server: '127.0.0.1', port, user, password, options: { trustServerCertificate: true } });
    out.connect = 'ok';
    out.query = (await pool.request().input('a', sql.Int, 5).query('SELECT @a AS a, 1 AS one')).recordset;
    const t = new sql.Transaction(pool);
    await t.begin();
    await new sql.Request(t).input('body', sql.NVarChar, '<a/>').query(`DECLARE @h uniqueidentifier;
      BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
        TO SERVICE N'/Rekenserver/LoonfactorBerekening/RekenService'
        ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
      SEND ON CONVERSATION (@h) MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@body);`);
    out.in_transaction = (await new sql.Request(t).query('SELECT @@TRANCOUNT AS n')).recordset;
    await t.rollback();
    out.after_rollback = (await pool.request().query('SELECT COUNT(*) AS n FROM dbo.loonfactorberekening_reken')).recordset;
    await pool.close();
  } catch (e) {
    out.error = String(e);
  }
  console.log(JSON.stringify(out));
})();

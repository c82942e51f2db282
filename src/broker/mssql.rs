//! The SQL Server transport: Service Broker over TDS with tiberius. Configured with an
//! ADO.NET connection string (TLS on by default); every session runs `SET XACT_ABORT
//! ON`, `SET NOCOUNT ON` and the ANSI options xml methods need, whatever the login's
//! defaults; transactions go through tiberius's transaction manager
//! requests; the statements are in `broker/mssql/statements/session.sql`. A session has two connections:
//! one for the work, and one outside its transactions for the durable attempt counts.
//! Errors are classified by SQL Server error number in [`classify`].

use std::time::Duration;

use tiberius::{AuthMethod, Client, Config, EncryptionLevel};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};
use uuid::Uuid;

use super::{BrokerError, ErrorKind, Message};
use crate::transport::{self, Attempt, DeadLetter, Fault, MessageKey, QueueState, Transport};

/// The statements this transport sends (`broker/mssql/statements/session.sql`).
pub use crate::sql::statements::mssql_session as stmt;

/// Every statement of `broker/mssql/statements/session.sql`, as sent (identifiers filled
/// in with sample names): for the emulator's recogniser tests.
pub fn statements_as_sent() -> Vec<(&'static str, String)> {
    stmt::ALL
        .iter()
        .map(|s| {
            let sent = s
                .sql
                .replace("{queue}", &quote_name("dbo.loonfactorberekening_reken").unwrap_or_default())
                .replace("{message_type}", &quote_identifier("/Rekenserver/LoonfactorBerekening/Antwoord"));
            (s.name, sent)
        })
        .collect()
}

/// Where sqlcmd scripting variables come from, lowest precedence first (sqlcmd's
/// documented order): the environment, then `-v` (`--var`), then a `:setvar` in the
/// script, which applies from its line on.
pub struct SqlcmdVars<'a> {
    /// `-v NAME=VALUE` (`sbworker install --var`).
    pub given: &'a [(String, String)],
    /// The environment's variables (`std::env::var`, or none in tests).
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

impl SqlcmdVars<'_> {
    /// Only the given variables, no environment.
    pub fn only(given: &[(String, String)]) -> SqlcmdVars<'_> {
        SqlcmdVars { given, env: &|_| None }
    }
}

/// A sqlcmd script made ready to send: `$(Name)` replaced by its value (see
/// [`SqlcmdVars`] for where values come from; names are case-insensitive), split into
/// batches at `GO` lines. A variable with no value is an error naming it, as in sqlcmd,
/// before any batch is sent. `:on error exit` is what sbworker does anyway (the first
/// failing batch stops it); other sqlcmd commands are refused.
pub fn sqlcmd_batches(script: &str, vars: &SqlcmdVars<'_>) -> Result<Vec<String>, String> {
    let mut setvars: Vec<(String, String)> = Vec::new();
    let lookup = |setvars: &[(String, String)], name: &str| -> Option<String> {
        let find = |list: &[(String, String)]| {
            list.iter().rev().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.clone())
        };
        find(setvars).or_else(|| find(vars.given)).or_else(|| (vars.env)(name))
    };
    let mut batches = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let t = line.trim();
        if t.len() >= 7 && t[..7].eq_ignore_ascii_case(":setvar") {
            let mut it = t[7..].split_whitespace();
            let (Some(name), Some(value)) = (it.next(), it.next()) else {
                return Err(format!("':setvar' needs a name and a value: {t}"));
            };
            setvars.push((name.to_owned(), value.trim_matches('"').to_owned()));
            continue;
        }
        if t.eq_ignore_ascii_case(":on error exit") {
            continue;
        }
        if t.starts_with(':') {
            return Err(format!("sqlcmd command not supported: {t}"));
        }
        if t.eq_ignore_ascii_case("go") {
            if !current.trim().is_empty() {
                batches.push(std::mem::take(&mut current));
            }
            current.clear();
            continue;
        }
        // Substituted line by line, with the values in force at this line.
        let mut rest = line;
        while let Some(i) = rest.find("$(") {
            let Some(j) = rest[i..].find(')') else { break };
            let name = &rest[i + 2..i + j];
            let value = lookup(&setvars, name).ok_or_else(|| {
                format!("scripting variable '{name}' is not defined: give it with --var {name}=VALUE (sqlcmd: -v {name}=VALUE)")
            })?;
            current.push_str(&rest[..i]);
            current.push_str(&value);
            rest = &rest[i + j + 1..];
        }
        current.push_str(rest);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        batches.push(current);
    }
    Ok(batches)
}

/// The scripts of `broker/mssql/`, in the order they run.
pub const SCRIPTS: &[(&str, &str)] = &[
    ("00_database.sql", include_str!("../../broker/mssql/00_database.sql")),
    ("01_service_broker.sql", include_str!("../../broker/mssql/01_service_broker.sql")),
    ("02_worker.sql", include_str!("../../broker/mssql/02_worker.sql")),
    ("03_results.sql", include_str!("../../broker/mssql/03_results.sql")),
    ("04_roster.sql", include_str!("../../broker/mssql/04_roster.sql")),
    ("05_handoff.sql", include_str!("../../broker/mssql/05_handoff.sql")),
    ("06_security.sql", include_str!("../../broker/mssql/06_security.sql")),
];

/// The version stamp 06_security.sql writes (`sbworker_version`, an extended property
/// of the database): this version and the hash of the scripts. A test keeps the script's
/// literal equal to it.
pub fn scripts_stamp() -> String {
    let texts: Vec<&str> = SCRIPTS.iter().map(|(_, s)| *s).collect();
    crate::sql::stamp(&texts)
}

/// The modules (procedures, functions, triggers) the scripts create, as
/// `schema.name`, lower case.
pub fn modules() -> Vec<String> {
    let mut out = Vec::new();
    for (_, script) in SCRIPTS {
        for line in script.lines() {
            let upper = line.trim_start().to_uppercase();
            for kind in ["CREATE OR ALTER PROCEDURE ", "CREATE OR ALTER FUNCTION ", "CREATE OR ALTER TRIGGER "] {
                if let Some(rest) = upper.strip_prefix(kind) {
                    let name = rest.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("");
                    out.push(name.replace(['[', ']'], "").to_lowercase());
                }
            }
        }
    }
    out
}

/// The SET options every script sets in its first batch, before anything is created
/// (the text of each script and of the generated 07).
pub const SET_OPTIONS: &str = "SET ANSI_NULLS ON;\nSET ANSI_PADDING ON;\nSET ANSI_WARNINGS ON;\nSET ARITHABORT ON;\n\
                               SET CONCAT_NULL_YIELDS_NULL ON;\nSET QUOTED_IDENTIFIER ON;\nSET NUMERIC_ROUNDABORT OFF;\n";

/// Optional scripts, run by hand: VALID_XML validation against `schemas/`.
pub const OPTIONAL_SCRIPTS: &[(&str, &str)] =
    &[("07_schema_collection.sql", include_str!("../../broker/mssql/07_schema_collection.sql"))];

/// `xsd` without its identity constraints (`xs:unique`, `xs:key`, `xs:keyref`): SQL
/// Server cannot register a schema holding them. What they say is checked elsewhere
/// (each wage factor code once: the decoder and `Rekenserver.sla_antwoord_op`).
fn without_identity_constraints(xsd: &str) -> String {
    let mut out = String::new();
    let mut rest = xsd;
    while let Some(i) = ["<xs:unique", "<xs:key", "<xs:keyref"].iter().filter_map(|t| rest.find(t)).min() {
        let kind = if rest[i..].starts_with("<xs:unique") {
            "xs:unique"
        } else if rest[i..].starts_with("<xs:keyref") {
            "xs:keyref"
        } else {
            "xs:key"
        };
        let close = format!("</{kind}>");
        let Some(j) = rest[i..].find(&close) else { break };
        out.push_str(&rest[..i]);
        out.push_str(&format!("<!-- {kind} left out: SQL Server cannot register identity constraints -->"));
        rest = &rest[i + j + close.len()..];
    }
    out.push_str(rest);
    out
}

/// What `broker/mssql/07_schema_collection.sql` must hold: the three XSDs of `schemas/`
/// (without their XML declarations, which an nvarchar literal cannot carry) in one XML
/// SCHEMA COLLECTION, and the message types switched to VALID_XML against it.
pub fn schema_collection_script() -> String {
    let xsds = [
        include_str!("../../schemas/LoonfactorBerekeningVraag.xsd"),
        include_str!("../../schemas/LoonfactorBerekeningAntwoord.xsd"),
        include_str!("../../schemas/RekenserverFout.xsd"),
    ];
    let body: Vec<String> = xsds
        .iter()
        .map(|x| {
            let x = match x.find("?>") {
                Some(i) if x.starts_with("<?xml") => &x[i + 2..],
                _ => x,
            };
            without_identity_constraints(x.trim()).replace('\'', "''")
        })
        .collect();
    let mut out = String::from(
        "-- sbworker on SQL Server, script 07 (optional, run by hand after 01): message types\n\
         -- validated as VALID_XML against the XSDs of schemas/, in one XML SCHEMA COLLECTION.\n\
         -- Generated from schemas/ by sbworker::broker::mssql::schema_collection_script: do not\n\
         -- edit; a test fails when it is not current (SBWORKER_WRITE_GENERATED=1 rewrites it).\n\n\
         :on error exit\n",
    );
    out.push_str(SET_OPTIONS);
    out.push_str(
        "GO\nUSE [$(Database)];\nGO\n\n\
         IF NOT EXISTS (SELECT 1 FROM sys.xml_schema_collections\n\
         \x20              WHERE name = N'LoonfactorBerekening' AND schema_id = SCHEMA_ID(N'Rekenserver'))\n\
         \x20   CREATE XML SCHEMA COLLECTION Rekenserver.LoonfactorBerekening AS N'",
    );
    out.push_str(&body.join("\n"));
    out.push_str("';\nGO\n\n");
    for t in
        ["/Rekenserver/LoonfactorBerekening/Vraag", "/Rekenserver/LoonfactorBerekening/Antwoord", "/Rekenserver/Fout"]
    {
        out.push_str(&format!(
            "ALTER MESSAGE TYPE [{t}] VALIDATION = VALID_XML WITH SCHEMA COLLECTION Rekenserver.LoonfactorBerekening;\nGO\n"
        ));
    }
    out
}

/// Runs the scripts against the server of `connection_string` (connected to
/// `master` or the target database; script 00 switches with USE), batch by batch.
pub async fn install(connection_string: &str, vars: &[(String, String)]) -> Result<usize, BrokerError> {
    let c = Connection::parse(connection_string).map_err(|e| BrokerError {
        kind: ErrorKind::Other,
        number: 0,
        message: e.to_string(),
    })?;
    let mut client = connect(&c).await?;
    let mut n = 0;
    for (file, script) in SCRIPTS {
        let env = |name: &str| std::env::var(name).ok();
        let batches = sqlcmd_batches(script, &SqlcmdVars { given: vars, env: &env }).map_err(|m| BrokerError {
            kind: ErrorKind::Other,
            number: 0,
            message: format!("{file}: {m}"),
        })?;
        for b in batches {
            client
                .simple_query(b)
                .await
                .map_err(|e| {
                    let mut be = error_of(e);
                    be.message = format!("{file}: {}", be.message);
                    be
                })?
                .into_results()
                .await
                .map_err(error_of)?;
            n += 1;
        }
    }
    Ok(n)
}

/// The kind of a SQL Server error number.
pub fn classify(number: u32) -> ErrorKind {
    match number {
        // The environment's faults (docs/retries.md): retried, never held against the
        // message. Locks: 1204 (no lock resource), 1205 (deadlock victim), 1222 (lock
        // timeout), 3960 (snapshot isolation update conflict).
        1204 | 1205 | 1222 | 3960 => ErrorKind::Retryable,
        // The transient errors Microsoft's SqlClient retries by default
        // (SqlConfigurableRetryFactory) and Azure SQL's documented ones: a database
        // unavailable or moving (4060, 4221, 40613, 42108, 42109), the service busy or
        // failing over (40143, 40197, 40501, 40540, 49918, 49919, 49920), resource
        // limits (10928, 10929), and the transport (233, 997, 10053, 10054, 10060): the
        // session is dropped and a new one opened.
        233 | 997 | 4060 | 4221 | 10053 | 10054 | 10060 | 10928 | 10929 | 40143 | 40197 | 40501 | 40540 | 40613
        | 42108 | 42109 | 49918 | 49919 | 49920 => ErrorKind::Connection,
        9617 => ErrorKind::QueueDisabled,
        8426 => ErrorKind::ConversationNotFound,
        8427 | 8429 => ErrorKind::InvalidState,
        8431 | 8432 => ErrorKind::ContractViolation,
        8430 | 9615 => ErrorKind::Validation,
        // Login failed: not worth retrying as such.
        18456 => ErrorKind::Other,
        _ => ErrorKind::Other,
    }
}

/// The one mapping from tiberius errors to broker errors.
pub fn error_of(e: tiberius::error::Error) -> BrokerError {
    match e {
        tiberius::error::Error::Server(t) => {
            BrokerError { kind: classify(t.code()), number: t.code() as i32, message: t.message().to_owned() }
        }
        // I/O (including a command timeout), TLS and protocol errors leave the
        // connection unusable: drop it and open a new one.
        other => BrokerError { kind: ErrorKind::Connection, number: 0, message: other.to_string() },
    }
}

/// `[name]`, with `]` doubled: an identifier T-SQL cannot take as a parameter.
pub fn quote_identifier(name: &str) -> String {
    format!("[{}]", name.replace(']', "]]"))
}

/// A queue name (`queue`, `schema.queue` or `database.schema.queue`), each part quoted.
pub fn quote_name(name: &str) -> Result<String, BrokerError> {
    let parts: Vec<&str> = name.split('.').collect();
    if parts.len() > 3 || parts.iter().any(|p| p.is_empty() || p.len() > 128) {
        return Err(BrokerError {
            kind: ErrorKind::NotFound,
            number: 0,
            message: format!("'{name}' is not a queue name (queue, schema.queue or database.schema.queue)"),
        });
    }
    Ok(parts.iter().map(|p| quote_identifier(p)).collect::<Vec<_>>().join("."))
}

/// An ADO.NET connection string, read: what sbworker uses of it.
#[derive(Clone, PartialEq)]
pub struct Connection {
    pub host: String,
    pub port: u16,
    pub database: Option<String>,
    pub user: String,
    pub password: String,
    pub encrypt: EncryptionLevel,
    pub trust_server_certificate: bool,
    pub application_name: String,
    pub command_timeout: Duration,
}

/// Debug output never shows the password.
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("database", &self.database)
            .field("user", &self.user)
            .field("password", &"***")
            .field("encrypt", &self.encrypt)
            .field("trust_server_certificate", &self.trust_server_certificate)
            .field("application_name", &self.application_name)
            .field("command_timeout", &self.command_timeout)
            .finish()
    }
}

/// Why a connection string is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("connection string: {0}")]
pub struct ConnectionStringError(pub String);

/// The ADO.NET reader (moved to [`crate::connstr`], where the masking uses it too).
pub use crate::connstr::ado_pairs;

fn truthy(key: &str, v: &str) -> Result<bool, ConnectionStringError> {
    match v.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" => Ok(true),
        "false" | "no" | "0" => Ok(false),
        _ => Err(ConnectionStringError(format!("'{key}' must be true or false, not '{v}'"))),
    }
}

impl Connection {
    /// Reads an ADO.NET connection string (`Server=tcp:host,1433;Database=…;User
    /// Id=…;Password=…;Encrypt=true;TrustServerCertificate=false;Command Timeout=30`).
    /// TLS is required unless `Encrypt=false` (or `optional`) says otherwise.
    pub fn parse(s: &str) -> Result<Self, ConnectionStringError> {
        let mut c = Connection {
            host: String::new(),
            port: 1433,
            database: None,
            user: String::new(),
            password: String::new(),
            encrypt: EncryptionLevel::Required,
            trust_server_certificate: false,
            application_name: "sbworker".into(),
            command_timeout: Duration::from_secs(30),
        };
        for (key, value) in ado_pairs(s).map_err(|e| ConnectionStringError(e.to_string()))? {
            match key.as_str() {
                "server" | "data source" | "address" | "addr" | "network address" => {
                    let v = value.strip_prefix("tcp:").unwrap_or(&value);
                    let (host, port) = match v.rsplit_once(',') {
                        Some((h, p)) => {
                            (h, p.trim().parse().map_err(|_| ConnectionStringError(format!("'{p}' is not a port")))?)
                        }
                        None => (v, 1433),
                    };
                    if host.contains('\\') {
                        return Err(ConnectionStringError(
                            "named instances (host\\instance) are not supported: give host,port".into(),
                        ));
                    }
                    c.host = host.trim().to_owned();
                    c.port = port;
                }
                "database" | "initial catalog" => c.database = Some(value),
                "user id" | "uid" | "user" => c.user = value,
                "password" | "pwd" => c.password = value,
                "encrypt" => {
                    c.encrypt = match value.to_ascii_lowercase().as_str() {
                        "strict" => EncryptionLevel::Strict,
                        "optional" => EncryptionLevel::On,
                        _ if truthy(&key, &value)? => EncryptionLevel::Required,
                        _ => EncryptionLevel::NotSupported,
                    }
                }
                "trustservercertificate" | "trust server certificate" => {
                    c.trust_server_certificate = truthy(&key, &value)?
                }
                "application name" | "app" => c.application_name = value,
                "command timeout" => {
                    let secs: u64 = value.parse().map_err(|_| {
                        ConnectionStringError(format!("'Command Timeout' must be seconds, not '{value}'"))
                    })?;
                    c.command_timeout = Duration::from_secs(secs);
                }
                "integrated security" | "trusted_connection" if truthy(&key, &value)? => {
                    return Err(ConnectionStringError(
                        "integrated security is not supported: use SQL authentication (User Id, Password)".into(),
                    ));
                }
                _ => {}
            }
        }
        if c.host.is_empty() {
            return Err(ConnectionStringError("'Server' is missing".into()));
        }
        if c.user.is_empty() {
            return Err(ConnectionStringError("'User Id' is missing (SQL authentication)".into()));
        }
        Ok(c)
    }

    /// The tiberius configuration.
    pub fn config(&self) -> Config {
        let mut config = Config::new();
        config.host(&self.host);
        config.port(self.port);
        if let Some(db) = &self.database {
            config.database(db);
        }
        config.application_name(&self.application_name);
        config.authentication(AuthMethod::sql_server(&self.user, &self.password));
        config.encryption(self.encrypt);
        if self.trust_server_certificate {
            config.trust_cert();
        }
        config.command_timeout(Some(self.command_timeout));
        config
    }
}

/// Checks what the configuration asks of this transport: every queue's WAITFOR
/// (`waits`: key and milliseconds) must end at least 2 s before the connection's Command
/// Timeout. The error names the key and the problem.
pub fn check_waits(connection_string: &str, waits: &[(String, u64)]) -> Result<(), (String, String)> {
    let c = Connection::parse(connection_string).map_err(|e| ("broker.connection".to_owned(), e.to_string()))?;
    let limit = c.command_timeout.as_millis() as u64;
    for (key, wait_ms) in waits {
        if wait_ms + 2_000 > limit {
            return Err((
                key.clone(),
                format!(
                    "is {wait_ms} ms; a WAITFOR must end at least 2 s before the connection's Command Timeout ({limit} ms)"
                ),
            ));
        }
    }
    Ok(())
}

/// A tiberius client over TCP.
pub type Tds = Client<Compat<TcpStream>>;

/// A connection as the transport opens them: TLS as configured, the session's SET
/// options run.
pub async fn connect(c: &Connection) -> Result<Tds, BrokerError> {
    let config = c.config();
    let tcp = TcpStream::connect(config.get_addr()).await.map_err(|e| BrokerError {
        kind: ErrorKind::Connection,
        number: 0,
        message: format!("cannot reach {}:{}: {e}", c.host, c.port),
    })?;
    tcp.set_nodelay(true).ok();
    let mut client = Client::connect(config, tcp.compat_write()).await.map_err(error_of)?;
    client.simple_query(stmt::SESSION_INIT.sql).await.map_err(error_of)?.into_results().await.map_err(error_of)?;
    Ok(client)
}

/// Opens SQL Server sessions.
#[derive(Debug, Clone)]
pub struct MssqlTransport {
    connection: Connection,
    masked: String,
}

impl MssqlTransport {
    pub fn new(connection_string: &str) -> Result<Self, ConnectionStringError> {
        Ok(Self { connection: Connection::parse(connection_string)?, masked: crate::connstr::mask(connection_string) })
    }

    /// The longest a single statement may wait for the server (the receive's
    /// WAITFOR must stay below it).
    pub fn command_timeout(&self) -> Duration {
        self.connection.command_timeout
    }
}

impl Transport for MssqlTransport {
    type Session = MssqlSession;

    async fn open(&self) -> Result<MssqlSession, BrokerError> {
        let work = connect(&self.connection).await?;
        let side = connect(&self.connection).await?;
        Ok(MssqlSession { work, side })
    }

    fn describe(&self) -> String {
        format!("mssql {}", self.masked)
    }

    fn poison_handling_off(&self, queue: &str) -> String {
        let q = quote_name(queue).unwrap_or_else(|_| queue.to_owned());
        format!("ALTER QUEUE {q} WITH POISON_MESSAGE_HANDLING (STATUS = OFF)")
    }
}

/// One SQL Server session: the working connection and the side connection.
pub struct MssqlSession {
    work: Tds,
    side: Tds,
}

fn keys_json(keys: &[MessageKey]) -> String {
    let items: Vec<String> =
        keys.iter().map(|k| format!("{{\"h\":\"{}\",\"s\":{}}}", k.conversation_handle, k.sequence)).collect();
    format!("[{}]", items.join(","))
}

fn message_of(row: &tiberius::Row) -> Result<Message, BrokerError> {
    let missing =
        |col: &str| BrokerError { kind: ErrorKind::Other, number: 0, message: format!("RECEIVE returned no {col}") };
    Ok(Message {
        id: 0,
        conversation_group_id: row.get::<Uuid, _>(0).ok_or_else(|| missing("conversation_group_id"))?,
        conversation_handle: row.get::<Uuid, _>(1).ok_or_else(|| missing("conversation_handle"))?,
        sequence: row.get::<i64, _>(2).ok_or_else(|| missing("message_sequence_number"))?,
        message_type: row.get::<&str, _>(3).ok_or_else(|| missing("message_type_name"))?.to_owned(),
        body: row.get::<&[u8], _>(4).map(<[u8]>::to_vec).unwrap_or_default(),
        service: row.get::<&str, _>(5).unwrap_or_default().to_owned(),
        contract: row.get::<&str, _>(6).unwrap_or_default().to_owned(),
    })
}

impl MssqlSession {
    /// Runs `sql` (a statement of a `.sql` file) on the working connection, inside the
    /// session's transaction: for handlers with business effects of their own.
    pub async fn execute(&mut self, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<(), BrokerError> {
        Self::exec(&mut self.work, sql, params).await
    }

    async fn rows(
        client: &mut Tds,
        sql: &str,
        params: &[&dyn tiberius::ToSql],
    ) -> Result<Vec<tiberius::Row>, BrokerError> {
        client.query(sql, params).await.map_err(error_of)?.into_first_result().await.map_err(error_of)
    }

    async fn exec(client: &mut Tds, sql: &str, params: &[&dyn tiberius::ToSql]) -> Result<(), BrokerError> {
        client.execute(sql, params).await.map_err(error_of)?;
        Ok(())
    }
}

impl transport::Session for MssqlSession {
    async fn begin(&mut self) -> Result<(), BrokerError> {
        self.work.begin_transaction().await.map_err(error_of)
    }

    async fn commit(&mut self) -> Result<(), BrokerError> {
        self.work.commit_transaction().await.map_err(error_of)
    }

    async fn rollback(&mut self) -> Result<bool, BrokerError> {
        match self.work.rollback_transaction().await.map_err(error_of) {
            // 3903: XACT_ABORT already rolled the transaction back.
            Err(e) if e.number == 3903 => Ok(false),
            Err(e) => Err(e),
            // SQL Server counts rolled-back receives itself; a disabled queue shows
            // as error 9617 at the next RECEIVE.
            Ok(()) => Ok(false),
        }
    }

    async fn receive(
        &mut self,
        queue: &str,
        max: i32,
        group: Option<Uuid>,
        wait: Duration,
    ) -> Result<Vec<Message>, BrokerError> {
        let q = quote_name(queue)?;
        let timeout = i32::try_from(wait.as_millis()).unwrap_or(i32::MAX);
        let rows = match group {
            None => Self::rows(&mut self.work, &stmt::RECEIVE.sql.replace("{queue}", &q), &[&max, &timeout]).await?,
            Some(g) => {
                Self::rows(&mut self.work, &stmt::RECEIVE_GROUP.sql.replace("{queue}", &q), &[&max, &timeout, &g])
                    .await?
            }
        };
        rows.iter().map(message_of).collect()
    }

    async fn receive_conversation(&mut self, queue: &str, handle: Uuid) -> Result<Vec<Message>, BrokerError> {
        let q = quote_name(queue)?;
        let rows =
            Self::rows(&mut self.work, &stmt::RECEIVE_CONVERSATION.sql.replace("{queue}", &q), &[&handle]).await?;
        rows.iter().map(message_of).collect()
    }

    async fn send(&mut self, handle: Uuid, message_type: &str, body: Option<&[u8]>) -> Result<(), BrokerError> {
        let t = quote_identifier(message_type);
        match body {
            Some(b) => Self::exec(&mut self.work, &stmt::SEND.sql.replace("{message_type}", &t), &[&handle, &b]).await,
            None => Self::exec(&mut self.work, &stmt::SEND_EMPTY.sql.replace("{message_type}", &t), &[&handle]).await,
        }
    }

    async fn end_conversation(&mut self, handle: Uuid, error: Option<(i32, &str)>) -> Result<(), BrokerError> {
        match error {
            None => Self::exec(&mut self.work, stmt::END_CONVERSATION.sql, &[&handle]).await,
            Some((code, text)) => {
                let text: String = text.chars().take(3000).collect();
                Self::exec(&mut self.work, stmt::END_CONVERSATION_WITH_ERROR.sql, &[&handle, &code, &text.as_str()])
                    .await
            }
        }
    }

    async fn move_conversation(&mut self, handle: Uuid, group: Uuid) -> Result<(), BrokerError> {
        Self::exec(&mut self.work, stmt::MOVE_CONVERSATION.sql, &[&handle, &group]).await
    }

    async fn count_attempts(&mut self, queue: &str, keys: &[MessageKey]) -> Result<Vec<Attempt>, BrokerError> {
        let json = keys_json(keys);
        let rows = Self::rows(&mut self.side, stmt::COUNT_ATTEMPTS.sql, &[&queue, &json.as_str()]).await?;
        Ok(rows
            .iter()
            .filter_map(|r| {
                Some(Attempt {
                    key: MessageKey { conversation_handle: r.get::<Uuid, _>(0)?, sequence: r.get::<i64, _>(1)? },
                    attempts: r.get::<i32, _>(2)?,
                    last_error: r.get::<&str, _>(3).map(str::to_owned),
                    failures: r.try_get::<i32, _>(4).ok().flatten().unwrap_or(0),
                    transient_failures: r.try_get::<i32, _>(5).ok().flatten().unwrap_or(0),
                })
            })
            .collect())
    }

    async fn note_failure(&mut self, keys: &[MessageKey], error: &str, fault: Fault) -> Result<(), BrokerError> {
        let json = keys_json(keys);
        let transient = fault == Fault::Transient;
        Self::exec(&mut self.side, stmt::NOTE_FAILURE.sql, &[&json.as_str(), &error, &transient]).await
    }

    async fn forget_attempts(&mut self, keys: &[MessageKey]) -> Result<(), BrokerError> {
        let json = keys_json(keys);
        Self::exec(&mut self.work, stmt::FORGET_ATTEMPTS.sql, &[&json.as_str()]).await
    }

    async fn dead_letter(&mut self, l: DeadLetter<'_>) -> Result<(), BrokerError> {
        let m = l.message;
        let body = (!m.body.is_empty()).then_some(m.body.as_slice());
        Self::exec(
            &mut self.work,
            stmt::DEAD_LETTER.sql,
            &[
                &l.queue,
                &m.service.as_str(),
                &m.contract.as_str(),
                &m.conversation_group_id,
                &m.conversation_handle,
                &m.sequence,
                &m.message_type.as_str(),
                &body,
                &l.attempts,
                &l.reason,
            ],
        )
        .await
    }

    async fn queue_state(&mut self, queue: &str) -> Result<QueueState, BrokerError> {
        let rows = Self::rows(&mut self.side, stmt::QUEUE_STATE.sql, &[&queue]).await?;
        let Some(r) = rows.first() else {
            return Err(BrokerError {
                kind: ErrorKind::NotFound,
                number: 0,
                message: format!("queue {queue} is not found"),
            });
        };
        Ok(QueueState {
            enabled: r.get::<bool, _>(0).unwrap_or(false),
            messages: r.get::<i64, _>(1).unwrap_or(0),
            // An older wachtrij_status has no such column: assume the broker's default (on).
            poison_handling: r.try_get::<bool, _>(2).ok().flatten().unwrap_or(true),
        })
    }
}

impl transport::PayrollStore for MssqlSession {
    async fn claim_version(
        &mut self,
        dienstverband_id: i32,
        periode_id: i32,
        versie: i64,
    ) -> Result<bool, BrokerError> {
        let rows =
            Self::rows(&mut self.work, stmt::CLAIM_VERSION.sql, &[&dienstverband_id, &periode_id, &versie]).await?;
        Ok(rows.first().and_then(|r| r.get::<bool, _>(0)).unwrap_or(false))
    }

    async fn store_antwoord(
        &mut self,
        handle: Uuid,
        a: &crate::contract::Antwoord,
        _superseded: bool,
    ) -> Result<transport::Stored, BrokerError> {
        use transport::Stored;
        // The procedure reads the Antwoord itself (nodes()/value()), superseded marker
        // included, so the in-database collector and this one store alike.
        let xml = crate::contract::encode_antwoord(a);
        let rows = Self::rows(&mut self.work, stmt::STORE_ANTWOORD.sql, &[&handle, &xml.as_str()]).await?;
        Ok(match rows.first().and_then(|r| r.get::<&str, _>(0)) {
            Some("opgeslagen") => Stored::Stored,
            Some("verouderd") => Stored::Older,
            _ => Stored::Superseded,
        })
    }

    async fn record_fout(&mut self, handle: Uuid, message: &str) -> Result<(), BrokerError> {
        let text: String = message.chars().take(3000).collect();
        Self::exec(&mut self.work, stmt::RECORD_FOUT.sql, &[&handle, &text.as_str()]).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_numbers_are_classified_as_the_design_says() {
        assert_eq!(classify(1205), ErrorKind::Retryable);
        assert_eq!(classify(1222), ErrorKind::Retryable);
        assert_eq!(classify(9617), ErrorKind::QueueDisabled);
        assert_eq!(classify(8426), ErrorKind::ConversationNotFound);
        assert_eq!(classify(8429), ErrorKind::InvalidState);
        assert_eq!(classify(8427), ErrorKind::InvalidState);
        assert_eq!(classify(8431), ErrorKind::ContractViolation);
        assert_eq!(classify(9615), ErrorKind::Validation);
        assert_eq!(classify(18456), ErrorKind::Other);
        for transient in [1204, 3960] {
            assert_eq!(classify(transient), ErrorKind::Retryable, "{transient}");
        }
        for gone in [233, 4060, 40197, 40501, 40613, 49918, 10054] {
            assert_eq!(classify(gone), ErrorKind::Connection, "{gone}");
        }
        let io =
            error_of(tiberius::error::Error::Io { kind: std::io::ErrorKind::TimedOut, message: "timed out".into() });
        assert_eq!(io.kind, ErrorKind::Connection);
        assert!(io.is_retryable());
    }

    #[test]
    fn connection_strings_are_read_as_ado_net_reads_them() {
        let c = Connection::parse(
            "Server=tcp:db.example,1533;Initial Catalog=Payroll;User Id=sbworker;Password=\"p;w\"\"d\";\
             TrustServerCertificate=True;Command Timeout=45",
        )
        .unwrap();
        assert_eq!((c.host.as_str(), c.port), ("db.example", 1533));
        assert_eq!(c.database.as_deref(), Some("Payroll"));
        assert_eq!(c.password, "p;w\"d");
        assert!(c.trust_server_certificate);
        assert_eq!(c.encrypt, EncryptionLevel::Required, "TLS on by default");
        assert_eq!(c.command_timeout, Duration::from_secs(45));
        assert_eq!(Connection::parse("Server=h;UID=u;PWD={a;b}}c}").unwrap().password, "a;b}c");
        assert_eq!(Connection::parse("Server=h;User Id=u;Password='x;y'").unwrap().password, "x;y");
        assert_eq!(
            Connection::parse("Server=h;User Id=u;Encrypt=false").unwrap().encrypt,
            EncryptionLevel::NotSupported
        );
        assert!(Connection::parse("User Id=u").unwrap_err().0.contains("'Server'"));
        assert!(Connection::parse("Server=h;User Id=u;Password=\"open").unwrap_err().0.contains("not closed"));
        assert!(Connection::parse("Server=h\\SQLEXPRESS;User Id=u").unwrap_err().0.contains("named instances"));
        assert!(Connection::parse("Server=h;Integrated Security=true").unwrap_err().0.contains("SQL authentication"));
        assert!(Connection::parse("Server=h;User Id=u;Encrypt=maybe").is_err());
        let debug = format!("{c:?}");
        assert!(!debug.contains("p;w") && debug.contains("password: \"***\""), "{debug}");
    }

    #[test]
    fn sqlcmd_scripts_split_at_go_and_take_their_variables() {
        let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let script = ":on error exit\nUSE [$(Database)];\nGO\nSELECT 1;\n  go  \nSELECT '$(WorkerUser)'\n";
        let given = v(&[("Database", "Hr"), ("workeruser", "svc")]);
        let b = sqlcmd_batches(script, &SqlcmdVars::only(&given)).unwrap();
        assert_eq!(b, ["USE [Hr];\n", "SELECT 1;\n", "SELECT 'svc'\n"]);
        // A missing variable is an error naming it; nothing has a default.
        let e = sqlcmd_batches(script, &SqlcmdVars::only(&v(&[("Database", "Hr")]))).unwrap_err();
        assert!(e.contains("'WorkerUser' is not defined") && e.contains("--var WorkerUser="), "{e}");
        // sqlcmd's precedence: environment < -v < :setvar (from its line on).
        let env = |n: &str| (n == "Database").then(|| "FromEnv".to_owned());
        let only_env = SqlcmdVars { given: &[], env: &env };
        assert_eq!(sqlcmd_batches("USE [$(Database)]\n", &only_env).unwrap()[0], "USE [FromEnv]\n");
        let given = v(&[("Database", "FromV")]);
        let both = SqlcmdVars { given: &given, env: &env };
        assert_eq!(sqlcmd_batches("USE [$(Database)]\n", &both).unwrap()[0], "USE [FromV]\n");
        let b = sqlcmd_batches("SELECT '$(Database)'\nGO\n:setvar Database FromSetvar\nSELECT '$(Database)'\n", &both)
            .unwrap();
        assert_eq!(b, ["SELECT 'FromV'\n", "SELECT 'FromSetvar'\n"]);
        assert!(sqlcmd_batches(":r other.sql\n", &SqlcmdVars::only(&[])).is_err());
        // The scripts themselves need all three variables and set none.
        let all = v(&[("Database", "Payroll"), ("WorkerLogin", "sbworker"), ("WorkerUser", "sbworker")]);
        for (file, s) in SCRIPTS {
            assert!(sqlcmd_batches(s, &SqlcmdVars::only(&all)).is_ok(), "{file}");
        }
        let e = sqlcmd_batches(SCRIPTS[0].1, &SqlcmdVars::only(&[])).unwrap_err();
        assert!(e.contains("'Database' is not defined"), "{e}");
    }

    #[test]
    fn identifiers_are_bracket_quoted() {
        assert_eq!(quote_name("dbo.loonfactorberekening_reken").unwrap(), "[dbo].[loonfactorberekening_reken]");
        assert_eq!(quote_name("q]x").unwrap(), "[q]]x]");
        assert!(quote_name("a..b").is_err());
        assert_eq!(quote_identifier("/Rekenserver/Fout"), "[/Rekenserver/Fout]");
    }

    #[test]
    fn a_utf16_body_as_a_trigger_sends_it_is_answered() {
        // An `xml` value sent by a trigger arrives as UTF-16LE with a byte-order mark.
        let xml = include_str!("../../schemas/examples/valid/vraag-voorbeeld2.xml");
        let mut body = vec![0xFF, 0xFE];
        body.extend(xml.encode_utf16().flat_map(u16::to_le_bytes));
        let calc = crate::handlers::calculation::Calculation::new(
            std::sync::Arc::new(crate::engine::Tables::built_in().unwrap()),
            crate::contract::Limits::default(),
        );
        let answer = calc.answer(&body).expect("answered");
        assert!(answer.contains("Versie=\"17\""), "{answer}");
        assert_eq!(
            keys_json(&[MessageKey { conversation_handle: Uuid::nil(), sequence: 3 }]),
            "[{\"h\":\"00000000-0000-0000-0000-000000000000\",\"s\":3}]"
        );
    }

    #[test]
    fn every_statement_has_its_placeholders_filled() {
        for (name, sent) in statements_as_sent() {
            assert!(!sent.contains('{'), "{name}: {sent}");
        }
    }
}

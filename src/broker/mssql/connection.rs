//! ADO.NET connection strings as the SQL Server transport reads them, what the
//! configuration asks of them, and opening a connection.

use std::time::Duration;

use tiberius::{AuthMethod, Client, Config, EncryptionLevel};
use tokio::net::TcpStream;
use tokio_util::compat::{Compat, TokioAsyncWriteCompatExt};

use super::{BrokerError, ErrorKind, error_of, stmt};

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

#[cfg(test)]
mod tests {
    use super::*;

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
}

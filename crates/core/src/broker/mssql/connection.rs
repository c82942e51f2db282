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
    /// The TCP port: given (`host,port`), the default 1433, or, for a named instance
    /// without one, asked of the SQL Server Browser when connecting.
    pub port: u16,
    /// A named instance (`host\INSTANCE`).
    pub instance: Option<String>,
    /// Whether the string gave the port (a named instance's port then needs no browser).
    pub port_given: bool,
    /// The SQL Server Browser's UDP port (1434; another only in tests).
    pub browser_port: u16,
    /// `Connect Timeout`: opening the connection (the browser's lookup, TCP, TLS and
    /// login) gives up after this (15 s, as ADO.NET's default).
    pub connect_timeout: Duration,
    pub database: Option<String>,
    pub user: String,
    pub password: String,
    pub encrypt: EncryptionLevel,
    pub trust_server_certificate: bool,
    pub application_name: String,
    pub command_timeout: Duration,
    /// Whether the string gave `Command Timeout` (a tool whose one statement runs long,
    /// the sweep, takes a longer default when it did not).
    pub command_timeout_given: bool,
}

/// Debug output never shows the password.
impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("host", &self.host)
            .field("port", &self.port)
            .field("instance", &self.instance)
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

/// The keys sbworker honours, as the refusal of any other names them.
const HONOURED: &str = "Server (Data Source), Database (Initial Catalog), User Id, Password, Encrypt, \
                        TrustServerCertificate, Application Name, Command Timeout, Connect Timeout; \
                        MultiSubnetFailover, ApplicationIntent and MultipleActiveResultSets at their defaults";

/// The ADO.NET reader (moved to [`crate::connstr`], where the masking uses it too).
pub use crate::connstr::ado_pairs;

/// A whole number of seconds, for the key named `name`.
fn seconds(name: &str, value: &str) -> Result<Duration, ConnectionStringError> {
    let secs: u64 =
        value.parse().map_err(|_| ConnectionStringError(format!("'{name}' must be seconds, not '{value}'")))?;
    Ok(Duration::from_secs(secs))
}

/// A key ADO.NET knows and sbworker does not honour, or honours only at one value: an
/// error saying what to do instead (or nothing, for the value that is honoured).
fn refused(key: &str, value: &str) -> Result<(), ConnectionStringError> {
    let why = match key {
        "integrated security" | "trusted_connection" if value.eq_ignore_ascii_case("sspi") || truthy(key, value)? => {
            format!(
                "'{key}={value}' (Windows or Kerberos authentication) is not supported by this build: use SQL \
                 authentication (User Id, Password); docs/sqlserver.md says why"
            )
        }
        "integrated security" | "trusted_connection" => return Ok(()),
        "multisubnetfailover" | "multi subnet failover" if truthy(key, value)? => {
            "'MultiSubnetFailover=true' is not supported: sbworker connects to the first address of the name and does \
             not try all of a listener's subnets at once; remove the key (a failover is then found on reconnecting, \
             within the listener's DNS TTL)"
                .to_owned()
        }
        "multisubnetfailover" | "multi subnet failover" => return Ok(()),
        "applicationintent" | "application intent" => match value.to_ascii_lowercase().as_str() {
            "readwrite" => return Ok(()),
            "readonly" => "'ApplicationIntent=ReadOnly' cannot be honoured: the worker writes (RECEIVE, SEND, \
                           results), which a read-only replica refuses; remove the key"
                .to_owned(),
            _ => format!("'ApplicationIntent' must be ReadWrite or ReadOnly, not '{value}'"),
        },
        "failover partner" | "failoverpartner" => "'Failover Partner' (database mirroring) is not supported: connect \
                                                   through the availability group listener's name instead"
            .to_owned(),
        "multipleactiveresultsets" | "multiple active result sets" | "mars" if truthy(key, value)? => {
            "'MultipleActiveResultSets=true' is not supported (sbworker opens a connection per reader): remove the key"
                .to_owned()
        }
        "multipleactiveresultsets" | "multiple active result sets" | "mars" => return Ok(()),
        other => format!("'{other}' is not a key sbworker honours: remove it. Honoured: {HONOURED}"),
    };
    Err(ConnectionStringError(why))
}

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
    /// TLS is required unless `Encrypt=false` (or `optional`) says otherwise. A key that
    /// sbworker cannot honour is refused, naming it and why; nothing is silently ignored.
    pub fn parse(s: &str) -> Result<Self, ConnectionStringError> {
        let mut c = Connection {
            host: String::new(),
            port: 1433,
            instance: None,
            port_given: false,
            browser_port: super::browser::BROWSER_PORT,
            connect_timeout: Duration::from_secs(15),
            database: None,
            user: String::new(),
            password: String::new(),
            encrypt: EncryptionLevel::Required,
            trust_server_certificate: false,
            application_name: "sbworker".into(),
            command_timeout: Duration::from_secs(30),
            command_timeout_given: false,
        };
        let entries = crate::connstr::ado_entries(s).map_err(|e| ConnectionStringError(e.to_string()))?;
        for entry in entries {
            let (key, value) = (entry.key, entry.value);
            match key.as_str() {
                "server" | "data source" | "address" | "addr" | "network address" => c.server(&value)?,
                "database" | "initial catalog" => c.database = Some(value),
                "user id" | "uid" | "user" => c.user = value,
                "password" | "pwd" => c.password = value,
                "encrypt" => c.encrypt(&key, &value)?,
                "trustservercertificate" | "trust server certificate" => {
                    c.trust_server_certificate = truthy(&key, &value)?
                }
                "application name" | "app" => c.application_name = value,
                "command timeout" => {
                    c.command_timeout = seconds("Command Timeout", &value)?;
                    c.command_timeout_given = true;
                }
                "connect timeout" | "connection timeout" | "timeout" => {
                    c.connect_timeout = seconds("Connect Timeout", &value)?;
                    if c.connect_timeout.is_zero() {
                        return Err(ConnectionStringError(
                            "'Connect Timeout' must be 1 or more seconds (0, no limit, is not supported)".into(),
                        ));
                    }
                }
                // (Two spellings SqlClient takes that the shared key list does not have.)
                other if crate::connstr::is_ado_key(other) || matches!(other, "failoverpartner" | "mars") => {
                    refused(other, &value)?
                }
                // Not named: an unknown "key" may be a piece of a password holding ';'.
                _ => {
                    let at = s[..entry.key_at.min(s.len())].chars().count() + 1;
                    return Err(ConnectionStringError(format!(
                        "a key ADO.NET does not know at character {at} (a value holding ';' must be quoted: \
                         \"...\", '...' or {{...}})"
                    )));
                }
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

    /// `Server=[tcp:]host[\instance][,port]`.
    fn server(&mut self, value: &str) -> Result<(), ConnectionStringError> {
        let v = value.strip_prefix("tcp:").unwrap_or(value);
        let (host, port) = match v.rsplit_once(',') {
            Some((h, p)) => {
                (h, Some(p.trim().parse().map_err(|_| ConnectionStringError(format!("'{p}' is not a port")))?))
            }
            None => (v, None),
        };
        let (host, instance) = match host.split_once('\\') {
            Some((h, i)) if !i.trim().is_empty() => (h, Some(i.trim().to_owned())),
            Some(_) => return Err(ConnectionStringError("'Server' names no instance after '\\'".into())),
            None => (host, None),
        };
        self.host = host.trim().to_owned();
        self.port = port.unwrap_or(1433);
        self.port_given = port.is_some();
        self.instance = instance;
        Ok(())
    }

    /// `Encrypt=strict|optional|true|false` (and ADO.NET's other words for yes and no).
    fn encrypt(&mut self, key: &str, value: &str) -> Result<(), ConnectionStringError> {
        self.encrypt = match value.to_ascii_lowercase().as_str() {
            "strict" => EncryptionLevel::Strict,
            "optional" => EncryptionLevel::On,
            _ if truthy(key, value)? => EncryptionLevel::Required,
            _ => EncryptionLevel::NotSupported,
        };
        Ok(())
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
/// A named instance without a port is looked up with the SQL Server Browser first. The
/// whole opening is bounded by `Connect Timeout`.
pub async fn connect(c: &Connection) -> Result<Tds, BrokerError> {
    let unreachable = |message: String| BrokerError { kind: ErrorKind::Connection, number: 0, message };
    let open = async {
        let mut config = c.config();
        let mut port = c.port;
        if let (Some(instance), false) = (&c.instance, c.port_given) {
            port = super::browser::resolve(&c.host, c.browser_port, instance).await.map_err(unreachable)?;
            config.port(port);
        }
        let tcp = TcpStream::connect((c.host.as_str(), port))
            .await
            .map_err(|e| unreachable(format!("cannot reach {}:{port}: {e}", c.host)))?;
        tcp.set_nodelay(true).ok();
        let mut client = Client::connect(config, tcp.compat_write()).await.map_err(error_of)?;
        client.simple_query(stmt::SESSION_INIT.sql).await.map_err(error_of)?.into_results().await.map_err(error_of)?;
        Ok(client)
    };
    tokio::time::timeout(c.connect_timeout, open).await.unwrap_or_else(|_| {
        Err(unreachable(format!(
            "no connection to {}{} within the Connect Timeout of {} s",
            c.host,
            c.instance.as_deref().map(|i| format!("\\{i}")).unwrap_or_default(),
            c.connect_timeout.as_secs()
        )))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_honoured_at_one_value_only_are_refused_at_the_others_saying_why() {
        let base = "Server=h;User Id=u;Password=p;";
        let ok = |extra: &str| Connection::parse(&format!("{base}{extra}")).map(|_| ()).map_err(|e| e.to_string());
        for accepted in
            ["MARS=false", "Integrated Security=false", "ApplicationIntent=ReadWrite", "MultiSubnetFailover=no"]
        {
            assert_eq!(ok(accepted), Ok(()), "{accepted}");
        }
        for (refused, says) in [
            ("MARS=true", "MultipleActiveResultSets=true"),
            ("FailoverPartner=x", "database mirroring"),
            ("Failover Partner=x", "database mirroring"),
            ("ApplicationIntent=ReadOnly", "read-only replica"),
            ("ApplicationIntent=maybe", "must be ReadWrite or ReadOnly"),
            ("Trusted_Connection=SSPI", "Windows or Kerberos"),
            ("Pooling=true", "not a key sbworker honours"),
            ("Connect Timeout=0", "1 or more seconds"),
            ("Command Timeout=soon", "must be seconds"),
        ] {
            let e = ok(refused).unwrap_err();
            assert!(e.contains(says), "{refused}: {e}");
        }
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
        let named = Connection::parse("Server=h\\SQLEXPRESS;User Id=u").unwrap();
        assert_eq!(
            (named.host.as_str(), named.instance.as_deref(), named.port_given),
            ("h", Some("SQLEXPRESS"), false)
        );
        let both = Connection::parse("Server=tcp:h\\SQLEXPRESS,1500;User Id=u").unwrap();
        assert_eq!((both.instance.as_deref(), both.port, both.port_given), (Some("SQLEXPRESS"), 1500, true));
        assert!(Connection::parse("Server=h\\;User Id=u").is_err());
        // Nothing silently ignored: each key is honoured or refused, naming it.
        for (string, says) in [
            ("Integrated Security=true", "Integrated Security=true"),
            ("Integrated Security=SSPI", "Integrated Security=SSPI"),
            ("Trusted_Connection=yes", "trusted_connection=yes"),
            ("MultiSubnetFailover=True", "MultiSubnetFailover=true"),
            ("ApplicationIntent=ReadOnly", "ApplicationIntent=ReadOnly"),
            ("Failover Partner=mirror", "Failover Partner"),
            ("MultipleActiveResultSets=true", "MultipleActiveResultSets=true"),
            ("Pooling=false", "'pooling' is not a key sbworker honours"),
            ("Connect Timeout=0", "1 or more seconds"),
            ("Integrated Security=maybe", "must be true or false"),
        ] {
            let e = Connection::parse(&format!("Server=h;User Id=u;{string}")).unwrap_err().0;
            assert!(e.to_lowercase().contains(&says.to_lowercase()), "{string}: {e}");
        }
        for accepted in [
            "MultiSubnetFailover=false",
            "ApplicationIntent=ReadWrite",
            "Integrated Security=false",
            "MultipleActiveResultSets=false",
        ] {
            assert!(Connection::parse(&format!("Server=h;User Id=u;{accepted}")).is_ok(), "{accepted}");
        }
        // A password holding ';' unquoted: its piece after the ';' reads as a key, and is
        // not named (it is part of the secret).
        let e = Connection::parse("Server=h;User Id=u;Password=s3cr;et=Tail9").unwrap_err().0;
        assert!(e.contains("a key ADO.NET does not know at character 34"), "{e}");
        assert!(!e.contains("'et'") && !e.contains("Tail9") && !e.contains("s3cr"), "{e}");
        let timeout = Connection::parse("Server=h;User Id=u;Connect Timeout=3").unwrap();
        assert_eq!(timeout.connect_timeout, Duration::from_secs(3));
        assert!(Connection::parse("Server=h;User Id=u;Encrypt=maybe").is_err());
        let debug = format!("{c:?}");
        assert!(!debug.contains("p;w") && debug.contains("password: \"***\""), "{debug}");
    }
}

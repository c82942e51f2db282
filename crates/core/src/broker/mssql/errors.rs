//! SQL Server errors in Service Broker's terms (by error number), and identifier quoting.

use super::{BrokerError, ErrorKind};

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
    fn identifiers_are_bracket_quoted() {
        assert_eq!(quote_name("dbo.loonfactorberekening_reken").unwrap(), "[dbo].[loonfactorberekening_reken]");
        assert_eq!(quote_name("q]x").unwrap(), "[q]]x]");
        assert!(quote_name("a..b").is_err());
        assert_eq!(quote_identifier("/Rekenserver/Fout"), "[/Rekenserver/Fout]");
    }
}

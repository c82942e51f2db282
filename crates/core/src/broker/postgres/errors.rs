//! PostgreSQL errors in Service Broker's terms: which are the environment's (retried,
//! never held against a message) and which SQL Server number each stands for.

use super::{BrokerError, ErrorKind};

/// A PostgreSQL error as the broker sees it: its kind and SQL Server's number.
pub fn error_of(e: tokio_postgres::Error) -> BrokerError {
    error_of_ref(&e)
}

/// [`error_of`], for an error still needed afterwards.
pub fn error_of_ref(e: &tokio_postgres::Error) -> BrokerError {
    let Some(db) = e.as_db_error() else {
        return BrokerError { kind: ErrorKind::Connection, number: 0, message: with_causes(e) };
    };
    let code = db.code().code();
    let (kind, number) = match code {
        // The environment's faults (docs/retries.md): retried, never held against the
        // message. Deadlock, serialization failure, lock timeout, a statement cancelled
        // (statement_timeout, pg_cancel_backend), insufficient resources (class 53: out of
        // memory, disk full, too many connections).
        "40P01" => (ErrorKind::Retryable, 1205),
        "40001" => (ErrorKind::Retryable, 1205),
        "55P03" => (ErrorKind::Retryable, 1222),
        "57014" => (ErrorKind::Retryable, 0),
        c if c.starts_with("53") => (ErrorKind::Retryable, 0),
        // Permission denied: SQL Server's 229 (a right not granted is not worth
        // retrying, and it is not the message's fault either: the run stops on it).
        "42501" => (ErrorKind::Other, 229),
        "SB617" => (ErrorKind::QueueDisabled, 9617),
        "SB426" => (ErrorKind::ConversationNotFound, 8426),
        "SB429" => (ErrorKind::InvalidState, 8429),
        "SB431" => (ErrorKind::ContractViolation, 8431),
        "SB432" => (ErrorKind::ContractViolation, 8432),
        "SB615" => (ErrorKind::Validation, 9615),
        "SB404" | "SB424" | "SB425" | "SB409" => (ErrorKind::NotFound, 0),
        // Connection exceptions, and the server shutting down or restarting (admin,
        // crash, cannot connect now) or ending an idle session.
        c if c.starts_with("08") || matches!(c, "57P01" | "57P02" | "57P03" | "57P05") => (ErrorKind::Connection, 0),
        _ => (ErrorKind::Other, 0),
    };
    BrokerError { kind, number, message: db.message().to_owned() }
}

/// `e` followed by its causes ("error connecting to server: Connection refused (os error
/// 111)"): tokio-postgres' own text leaves the cause out.
fn with_causes(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cause = std::error::Error::source(e);
    while let Some(c) = cause {
        let c_text = c.to_string();
        if !text.ends_with(&c_text) {
            text.push_str(": ");
            text.push_str(&c_text);
        }
        cause = c.source();
    }
    text
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn a_connection_error_names_its_cause() {
        // A port nobody listens on: bound, then released.
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let url = format!("host=127.0.0.1 port={port} user=x dbname=x connect_timeout=5");
        let e = tokio_postgres::connect(&url, tokio_postgres::NoTls).await.err().expect("nothing listens");
        let b = super::error_of(e);
        assert_eq!(b.kind, super::ErrorKind::Connection);
        assert!(b.message.contains("refused"), "{}", b.message);
    }
}

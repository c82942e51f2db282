//! A real SQL Server for the tests, when one is given (`SBWORKER_MSSQL_URL`, …; see
//! `tests/mssql_real.rs`): a new database with the scripts installed.

use sbworker::broker::mssql::{Connection, install};
use uuid::Uuid;

/// A new database on the given SQL Server with the scripts installed: a DBA's
/// connection string into it, and the worker login's.
pub struct RealDb {
    pub admin: String,
    pub worker: String,
}

/// [`RealDb`], or `None` when no SQL Server is given.
pub async fn database() -> Option<RealDb> {
    let (Ok(admin), Ok(login), Ok(password)) = (
        std::env::var("SBWORKER_MSSQL_URL"),
        std::env::var("SBWORKER_MSSQL_WORKER_LOGIN"),
        std::env::var("SBWORKER_MSSQL_WORKER_PASSWORD"),
    ) else {
        return None;
    };
    let db = format!("sbworker_test_{}", Uuid::new_v4().simple());
    let vars = [
        ("Database".to_owned(), db.clone()),
        ("WorkerLogin".to_owned(), login.clone()),
        ("WorkerUser".to_owned(), login.clone()),
    ];
    // The DBA creates the database (script 00 checks it, it does not create it).
    {
        let mut master = sbworker::broker::mssql::connect(&Connection::parse(&admin).unwrap()).await.unwrap();
        master.execute(format!("CREATE DATABASE [{db}]"), &[]).await.expect("CREATE DATABASE");
    }
    install(&admin, &vars, sbworker::broker::mssql::Side::Both, false).await.expect("the scripts install");
    let server = admin_server(&admin);
    let credentials = |s: &str| {
        sbworker::broker::mssql::ado_pairs(s)
            .unwrap()
            .into_iter()
            .filter(|(k, _)| ["user id", "uid", "user", "password", "pwd", "integrated security"].contains(&k.as_str()))
            .map(|(k, v)| format!("{k}=\"{}\"", v.replace('"', "\"\"")))
            .collect::<Vec<_>>()
            .join(";")
    };
    Some(RealDb {
        admin: format!("{server};Database={db};{}", credentials(&admin)),
        worker: format!("{server};Database={db};User Id={login};Password=\"{}\"", password.replace('"', "\"\"")),
    })
}

/// The `Server=…` part of an ADO.NET string.
fn admin_server(admin: &str) -> String {
    sbworker::broker::mssql::ado_pairs(admin)
        .unwrap()
        .into_iter()
        .filter(|(k, _)| ["server", "data source", "encrypt", "trustservercertificate"].contains(&k.as_str()))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(";")
}

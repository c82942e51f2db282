//! `sbworker selftest --mssql CONN` (to be written).

use super::Report;

pub async fn run(_conn: &str) -> Report {
    let mut r = Report::new("mssql");
    r.fail("connection", super::Failure::new("not yet"));
    r
}

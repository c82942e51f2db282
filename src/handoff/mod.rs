//! Where results leave the system and the housekeeping around it (PostgreSQL):
//! [`export`] claims a period's unexported results for payroll in one statement (mode
//! once: at-most-once; mode lease: at-least-once with confirmation), and [`sweep`]
//! sends the keys whose roster is newer than their result, under a lock, a fuse and a
//! run log with retention. The statements are in `broker/postgres/handoff.sql`.

pub mod export;
pub mod sweep;

use crate::sql::SqlFile;

static HANDOFF_SQL: SqlFile =
    SqlFile::new("broker/postgres/handoff.sql", include_str!("../../broker/postgres/handoff.sql"));

fn stmt(name: &str) -> &'static str {
    HANDOFF_SQL.get(name)
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_statement_used_is_in_handoff_sql() {
        for code in [include_str!("export.rs"), include_str!("sweep.rs")] {
            for name in code.split("stmt(\"").skip(1).filter_map(|r| r.split('"').next()) {
                assert!(!super::stmt(name).is_empty(), "{name}");
            }
        }
    }
}

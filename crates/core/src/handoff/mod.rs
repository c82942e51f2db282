//! Where results leave the system and the housekeeping around it:
//! [`export`] claims a period's unexported results for payroll in one statement (mode
//! once: at-most-once; mode lease: at-least-once with confirmation), and [`sweep`]
//! sends the keys whose roster is newer than their result, under a lock, a fuse and a
//! run log with retention, and [`recompute`] computes chosen keys again after a change no
//! roster edit makes, and [`evidence`] explains a stored result from what it kept. The
//! statements are in `broker/postgres/statements/handoff.sql`; [`mssql`] does them on SQL
//! Server, through the procedures of `broker/mssql/04_roster.sql`, `03_results.sql` and
//! `05_handoff.sql`.

pub mod evidence;
pub mod export;
pub mod mssql;
pub mod recompute;
pub mod sweep;

/// The statements (`broker/postgres/statements/handoff.sql`).
use crate::sql::statements::postgres_handoff as stmt;

//! `sbworker selftest`: runs the checks of [`crate::selftest`] and prints the report
//! (a table on a terminal, with colour; plain lines otherwise; JSON with `--json`).

use std::io::IsTerminal;
use std::process::ExitCode;

/// Runs the selftest on the back end given; exit 0 when every check passed. `deep`:
/// SQL Server's deep steps, with the admin connection given (or the worker's). `side`:
/// which database of a SQL Server deployment `mssql` is.
pub fn run(
    postgres: Option<String>,
    mssql: Option<String>,
    json: bool,
    deep: Option<Option<String>>,
    side: crate::broker::mssql::Side,
) -> ExitCode {
    let rt = match super::runtime::runtime(false) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("sbworker selftest: {e}");
            return ExitCode::from(1);
        }
    };
    let report = match (postgres, mssql) {
        (Some(url), _) => rt.block_on(crate::selftest::postgres::run(&url)),
        (None, Some(conn)) => match deep {
            Some(admin) => rt.block_on(crate::selftest::mssql::run_deep(&conn, admin.as_deref().unwrap_or(&conn))),
            None => rt.block_on(crate::selftest::mssql::run_side(&conn, side)),
        },
        (None, None) => {
            eprintln!("sbworker selftest: give --postgres URL or --mssql CONN");
            return ExitCode::from(2);
        }
    };
    if json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text(std::io::stdout().is_terminal()));
    }
    if report.passed { ExitCode::SUCCESS } else { ExitCode::from(1) }
}

/// `sbworker selftest`.
pub fn main(a: crate::cli::args::SelftestArgs) -> super::Outcome {
    Ok(run(a.postgres, a.mssql, a.json, a.deep.then_some(a.admin), a.side.unwrap_or_default()))
}

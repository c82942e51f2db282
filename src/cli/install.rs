//! `sbworker install`: puts the broker scripts into a database.

use crate::broker::postgres;
use crate::transport::Side;

/// Installs (or brings up to date) the PostgreSQL broker at `url`; returns a line to
/// print.
/// `grants`: (group role, login) pairs to grant after the scripts.
/// `allow_older_workers`: replace the roster senders even while a live calculation
/// worker reads an older Vraag contract.
pub fn postgres(
    url: &str,
    roster: bool,
    side: Option<Side>,
    allow_older_workers: bool,
    grants: &[(&'static str, String)],
) -> anyhow::Result<String> {
    use anyhow::Context;
    let rt = super::runtime::runtime(false)?;
    if roster && !allow_older_workers {
        let older = rt.block_on(postgres::older_workers(url)).context("reading the workers' heartbeats")?;
        if !older.is_empty() {
            anyhow::bail!(
                "{} live calculation worker(s) read an older Vraag contract than this release's roster sender writes \
                 ({}): upgrade the workers first (docs/deployment.md), or go on anyway with --allow-older-workers",
                older.len(),
                older.join("; ")
            );
        }
    }
    let versions =
        rt.block_on(postgres::install_side(url, roster, side)).context("installing the PostgreSQL broker")?;
    rt.block_on(postgres::grant_roles(url, grants)).context("granting sbworker's roles")?;
    let granted: String = grants.iter().map(|(role, login)| format!("\n  {role} granted to {login}")).collect();
    Ok(format!(
        "PostgreSQL broker installed (schemas sb, sbworker, rekenserver{}; scripts {versions:?}; roles sbworker_worker, \
         sbworker_sender, sbworker_payroll, sbworker_housekeeping); running it again changes nothing.{granted}\n\
         Next, as the worker's login: sbworker selftest --postgres URL{}",
        if roster { ", rooster" } else { "" },
        match side {
            Some(Side::Roster) | Some(Side::Calc) => format!(
                "\nThis database is the {} side of a split install: join it with the other side's by \
                 sbworker link --roster URL --calc URL (docs/deployment.md).",
                side.unwrap_or_default()
            ),
            _ => String::new(),
        }
    ))
}

/// Runs the SQL Server scripts (`broker/mssql/`, in order) with sqlcmd-style
/// variables; returns a line to print.
/// `grants`: (group role, login) pairs, as for PostgreSQL; each login's user in the
/// database (made if missing) joins the job's SQL Server role.
/// `allow_older_workers`: script 04 replaces the roster senders even while a live
/// calculation worker reads an older Vraag contract (it refuses otherwise, 50150).
/// `side`: `--side` (None: the variable `Side` if given, else both).
pub fn mssql(
    connection_string: &str,
    vars: &[(String, String)],
    side: Option<Side>,
    allow_older_workers: bool,
    grants: &[(&'static str, String)],
) -> anyhow::Result<String> {
    use anyhow::Context;
    let env = |name: &str| std::env::var(name).ok();
    let sqlcmd = crate::broker::mssql::SqlcmdVars { given: vars, env: &env };
    let side = resolve_side(side, sqlcmd.value("Side").as_deref())?;
    // On SQL Server the worker must be the scripts' WorkerLogin: its user owns the services
    // and the dialogs, and only the owner may END a conversation; another login in
    // sbworker_role could receive but never end, and every group would fail.
    let worker_login = sqlcmd.value("WorkerLogin").unwrap_or_default();
    if let Some((_, other)) = grants.iter().find(|(role, login)| *role == "sbworker_worker" && *login != worker_login) {
        anyhow::bail!(
            "--worker-role {other}: on SQL Server the worker runs as the scripts' WorkerLogin ({worker_login}), whose \
             user owns the services and the dialogs (END CONVERSATION needs the owner); run every worker as that login"
        );
    }
    let rt = super::runtime::runtime(false)?;
    let n = rt
        .block_on(crate::broker::mssql::install(connection_string, vars, side, allow_older_workers))
        .context("installing the SQL Server scripts")?;
    // The database the scripts were run for, by sqlcmd's precedence.
    let database = sqlcmd.value("Database").unwrap_or_default();
    let granted = rt
        .block_on(crate::broker::mssql::grant_roles(connection_string, &database, grants))
        .context("adding logins to sbworker's roles")?;
    let granted: String =
        granted.iter().map(|(role, login, user)| format!("\n  login {login} (user {user}) added to {role}")).collect();
    let (what, next) = match side {
        Side::Both => ("both sides in one database", String::new()),
        Side::Roster => (
            "the roster side: roster, triggers, DataService and its queue, results, hand-off",
            " --side roster, after the calculation side, the endpoint and the routes \
             (broker/mssql/optional/endpoint.sql and routes.sql)"
                .to_owned(),
        ),
        Side::Calc => (
            "the calculation side: RekenService and its queue, the worker's bookkeeping",
            " --side calc, after the endpoint and the routes (broker/mssql/optional/endpoint.sql and routes.sql)"
                .to_owned(),
        ),
    };
    Ok(format!(
        "SQL Server scripts installed for {what} ({n} batches of broker/mssql/00..07, Side={side}; roles \
         sbworker_role, sbworker_sender_role, sbworker_payroll_role, sbworker_housekeeping_role, \
         sbworker_monitor_role, sbworker_operator_role); running them again changes nothing.{granted}\n\
         Next, as the worker's login: sbworker selftest --mssql CONN (with Database=...){next}"
    ))
}

/// `sbworker link`: joins the roster database at `roster` with each calculation
/// database of `calcs`; returns the lines to print.
pub fn link(roster: &str, calcs: &[String]) -> anyhow::Result<String> {
    use anyhow::Context;
    let rt = super::runtime::runtime(false)?;
    let mut out = Vec::new();
    for calc in calcs {
        let masked = crate::config::mask_secrets(calc);
        let l = rt.block_on(postgres::route::link(roster, calc)).with_context(|| format!("linking {masked}"))?;
        out.push(format!("linked {masked}: route {} there, route {} back", l.to_calculation, l.back));
    }
    out.push(format!(
        "{} calculation database(s) linked; new dialogs take them in turn. `sbworker status` on each side shows its \
         routes.",
        calcs.len()
    ));
    Ok(out.join("\n"))
}

/// The side to install: `--side`, else the sqlcmd variable `Side` (`--var Side=`, or the
/// environment, as sqlcmd reads it), else both. Both given and different: refused.
pub fn resolve_side(flag: Option<Side>, var: Option<&str>) -> anyhow::Result<Side> {
    let var =
        var.map(|v| v.parse::<Side>().map_err(|e| anyhow::anyhow!("the sqlcmd variable Side: {e}"))).transpose()?;
    match (flag, var) {
        (Some(f), Some(v)) if f != v => {
            anyhow::bail!("--side {f} and the sqlcmd variable Side={v} disagree: give the side once (--side)")
        }
        (f, v) => Ok(f.or(v).unwrap_or_default()),
    }
}

/// `sbworker install`.
pub fn main(a: crate::cli::args::InstallArgs) -> super::Outcome {
    let grants = a.roles.grants();
    let line = match (a.postgres, a.mssql) {
        (Some(url), _) => postgres(&url, a.roster, a.side, a.allow_older_workers, &grants)?,
        (None, Some(conn)) => mssql(&conn, &a.vars, a.side, a.allow_older_workers, &grants)?,
        (None, None) => return Err(anyhow::anyhow!("give --postgres URL or --mssql CONN").into()),
    };
    println!("{line}");
    Ok(std::process::ExitCode::SUCCESS)
}

/// `sbworker link`.
pub fn main_link(a: crate::cli::args::LinkArgs) -> super::Outcome {
    println!("{}", link(&a.roster, &a.calc)?);
    Ok(std::process::ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_side_is_the_flag_or_the_sqlcmd_variable_and_both_must_agree() {
        assert_eq!(resolve_side(None, None).unwrap(), Side::Both);
        assert_eq!(resolve_side(Some(Side::Calc), None).unwrap(), Side::Calc);
        assert_eq!(resolve_side(None, Some("roster")).unwrap(), Side::Roster);
        assert_eq!(resolve_side(Some(Side::Roster), Some("roster")).unwrap(), Side::Roster);
        let e = resolve_side(Some(Side::Calc), Some("roster")).unwrap_err().to_string();
        assert!(e.contains("--side calc and the sqlcmd variable Side=roster disagree"), "{e}");
        let e = resolve_side(None, Some("kalk")).unwrap_err().to_string();
        assert!(e.contains("'kalk' is not a side: give roster, calc or both"), "{e}");
    }
}

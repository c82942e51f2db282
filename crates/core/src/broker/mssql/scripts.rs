//! The SQL Server install scripts (`broker/mssql/`): sqlcmd's variables and batches as
//! sqlcmd reads them, the installer, the generated schema-collection script, the list
//! of modules and the version stamp.

use super::{BrokerError, Connection, ErrorKind, connect, error_of};

/// Where sqlcmd scripting variables come from, lowest precedence first (sqlcmd's
/// documented order): the environment, then `-v` (`--var`), then a `:setvar` in the
/// script, which applies from its line on.
pub struct SqlcmdVars<'a> {
    /// `-v NAME=VALUE` (`sbworker install --var`).
    pub given: &'a [(String, String)],
    /// The environment's variables (`std::env::var`, or none in tests).
    pub env: &'a dyn Fn(&str) -> Option<String>,
}

impl SqlcmdVars<'_> {
    /// Only the given variables, no environment.
    pub fn only(given: &[(String, String)]) -> SqlcmdVars<'_> {
        SqlcmdVars { given, env: &|_| None }
    }

    /// A variable's value outside a script (no `:setvar`): `-v`, else the environment.
    pub fn value(&self, name: &str) -> Option<String> {
        self.given
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .or_else(|| (self.env)(name))
    }
}

/// A sqlcmd script made ready to send: `$(Name)` replaced by its value (see
/// [`SqlcmdVars`] for where values come from; names are case-insensitive), split into
/// batches at `GO` lines. A variable with no value is an error naming it, as in sqlcmd,
/// before any batch is sent. `:on error exit` is what sbworker does anyway (the first
/// failing batch stops it); other sqlcmd commands are refused.
pub fn sqlcmd_batches(script: &str, vars: &SqlcmdVars<'_>) -> Result<Vec<String>, String> {
    let mut setvars: Vec<(String, String)> = Vec::new();
    let lookup = |setvars: &[(String, String)], name: &str| -> Option<String> {
        setvars
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.clone())
            .or_else(|| vars.value(name))
    };
    let mut batches = Vec::new();
    let mut current = String::new();
    for line in script.lines() {
        let t = line.trim();
        if t.len() >= 7 && t[..7].eq_ignore_ascii_case(":setvar") {
            let mut it = t[7..].split_whitespace();
            let (Some(name), Some(value)) = (it.next(), it.next()) else {
                return Err(format!("':setvar' needs a name and a value: {t}"));
            };
            setvars.push((name.to_owned(), value.trim_matches('"').to_owned()));
            continue;
        }
        if t.eq_ignore_ascii_case(":on error exit") {
            continue;
        }
        if t.starts_with(':') {
            return Err(format!("sqlcmd command not supported: {t}"));
        }
        if t.eq_ignore_ascii_case("go") {
            if !current.trim().is_empty() {
                batches.push(std::mem::take(&mut current));
            }
            current.clear();
            continue;
        }
        // Substituted line by line, with the values in force at this line.
        let mut rest = line;
        while let Some(i) = rest.find("$(") {
            let Some(j) = rest[i..].find(')') else { break };
            let name = &rest[i + 2..i + j];
            let value = lookup(&setvars, name).ok_or_else(|| {
                format!("scripting variable '{name}' is not defined: give it with --var {name}=VALUE (sqlcmd: -v {name}=VALUE)")
            })?;
            current.push_str(&rest[..i]);
            current.push_str(&value);
            rest = &rest[i + j + 1..];
        }
        current.push_str(rest);
        current.push('\n');
    }
    if !current.trim().is_empty() {
        batches.push(current);
    }
    Ok(batches)
}

/// The scripts of `broker/mssql/`, in the order they run: every `NN_*.sql` file of the
/// folder, in the order of its number, so that sqlcmd's loop over
/// `broker/mssql/[0-9][0-9]_*.sql` (docs/deployment.md) runs the same files in the same
/// order (`tests/mssql_scripts.rs` compares the three). The security script runs last:
/// it grants what the others create.
pub const SCRIPTS: &[(&str, &str)] = &[
    ("00_database.sql", include_str!("../../../../../broker/mssql/00_database.sql")),
    ("01_service_broker.sql", include_str!("../../../../../broker/mssql/01_service_broker.sql")),
    ("02_worker.sql", include_str!("../../../../../broker/mssql/02_worker.sql")),
    ("03_results.sql", include_str!("../../../../../broker/mssql/03_results.sql")),
    ("04_roster.sql", include_str!("../../../../../broker/mssql/04_roster.sql")),
    ("05_handoff.sql", include_str!("../../../../../broker/mssql/05_handoff.sql")),
    ("06_operations.sql", include_str!("../../../../../broker/mssql/06_operations.sql")),
    ("07_security.sql", include_str!("../../../../../broker/mssql/07_security.sql")),
];

pub use crate::transport::Side;

/// The sides a region switch line opens a region for: `IF '$(Side)' NOT IN ('both',
/// 'calc') SET NOEXEC ON;` (the scripts' only form of it) runs the batches up to the next
/// `SET NOEXEC OFF;` on the sides listed, and compiles them without running them on the
/// others (SET NOEXEC). None for any other line.
pub fn region_sides(line: &str) -> Option<Vec<Side>> {
    let code = line.split("--").next().unwrap_or("").trim();
    let list = code.strip_prefix("IF '$(Side)' NOT IN (")?.strip_suffix(") SET NOEXEC ON;")?;
    list.split(',').map(|v| v.trim().trim_matches('\'').parse::<Side>().ok()).collect()
}

/// Whether `line` closes a region (`SET NOEXEC OFF;`).
pub fn region_end(line: &str) -> bool {
    line.split("--").next().unwrap_or("").trim() == "SET NOEXEC OFF;"
}

/// `script` as it runs on `side`: the lines of the regions that side skips blanked (the
/// line count kept), everything else as it is.
pub fn for_side(script: &str, side: Side) -> String {
    let mut skipping = false;
    let mut out = String::with_capacity(script.len());
    for line in script.lines() {
        if let Some(sides) = region_sides(line) {
            skipping = !sides.contains(&side);
            out.push_str(line);
        } else if region_end(line) {
            skipping = false;
            out.push_str(line);
        } else if !skipping {
            out.push_str(line);
        }
        out.push('\n');
    }
    out
}

/// The version stamp 07_security.sql writes (`sbworker_version`, an extended property
/// of the database): this version and the hash of the scripts. A test keeps the script's
/// literal equal to it.
pub fn scripts_stamp() -> String {
    let texts: Vec<&str> = SCRIPTS.iter().map(|(_, s)| *s).collect();
    crate::sql::stamp(&texts)
}

/// The modules (procedures, functions, triggers) the scripts create in a database of
/// `side`, as `schema.name`, lower case (once each: a module with a version per side is
/// one module).
pub fn modules(side: Side) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (_, script) in SCRIPTS {
        for line in for_side(script, side).lines() {
            let upper = line.trim_start().to_uppercase();
            for kind in ["CREATE OR ALTER PROCEDURE ", "CREATE OR ALTER FUNCTION ", "CREATE OR ALTER TRIGGER "] {
                if let Some(rest) = upper.strip_prefix(kind) {
                    let name = rest.split(|c: char| c.is_whitespace() || c == '(').next().unwrap_or("");
                    let name = name.replace(['[', ']'], "").to_lowercase();
                    if !out.contains(&name) {
                        out.push(name);
                    }
                }
            }
        }
    }
    out
}

/// The SET options every script sets in its first batch, before anything is created
/// (the text of each script and of the generated 07).
pub const SET_OPTIONS: &str = "SET ANSI_NULLS ON;\nSET ANSI_PADDING ON;\nSET ANSI_WARNINGS ON;\nSET ARITHABORT ON;\n\
                               SET CONCAT_NULL_YIELDS_NULL ON;\nSET QUOTED_IDENTIFIER ON;\nSET NUMERIC_ROUNDABORT OFF;\n";

/// Optional scripts, run by hand: VALID_XML validation against `schemas/` (first); for a
/// split deployment (docs/sqlserver.md, "Two databases, two servers") the Service Broker
/// endpoint and its certificates (in master) and the routes between the two databases;
/// event-based activation for queues served with `min_readers = 0` (the notification
/// queue `sbworker.activation` and a QUEUE_ACTIVATION event notification on each of the
/// side's queues).
pub const OPTIONAL_SCRIPTS: &[(&str, &str)] = &[
    ("optional/schema_collection.sql", include_str!("../../../../../broker/mssql/optional/schema_collection.sql")),
    ("optional/endpoint.sql", include_str!("../../../../../broker/mssql/optional/endpoint.sql")),
    ("optional/routes.sql", include_str!("../../../../../broker/mssql/optional/routes.sql")),
    ("optional/activation.sql", include_str!("../../../../../broker/mssql/optional/activation.sql")),
];

/// `xsd` without its identity constraints (`xs:unique`, `xs:key`, `xs:keyref`): SQL
/// Server cannot register a schema holding them. What they say is checked elsewhere
/// (each wage factor code once: the decoder and `Rekenserver.sla_antwoord_op`).
fn without_identity_constraints(xsd: &str) -> String {
    let mut out = String::new();
    let mut rest = xsd;
    while let Some(i) = ["<xs:unique", "<xs:key", "<xs:keyref"].iter().filter_map(|t| rest.find(t)).min() {
        let kind = if rest[i..].starts_with("<xs:unique") {
            "xs:unique"
        } else if rest[i..].starts_with("<xs:keyref") {
            "xs:keyref"
        } else {
            "xs:key"
        };
        let close = format!("</{kind}>");
        let Some(j) = rest[i..].find(&close) else { break };
        out.push_str(&rest[..i]);
        out.push_str(&format!("<!-- {kind} left out: SQL Server cannot register identity constraints -->"));
        rest = &rest[i + j + close.len()..];
    }
    out.push_str(rest);
    out
}

/// The collection's name carries a hash of its XSDs: an XML schema collection's
/// components cannot be changed (ALTER XML SCHEMA COLLECTION only adds), so a changed XSD
/// gets a collection of its own, the message type moves to it in one transaction, and
/// the old one is dropped once nothing references it.
fn collection_name_of(xsd: &str) -> String {
    format!("LoonfactorBerekening_{:016x}", crate::sql::fnv1a(xsd.as_bytes()))
}

/// The name of this release's schema collection (`optional/schema_collection.sql`).
pub fn schema_collection_name() -> String {
    let script = schema_collection_script();
    let at = script.find("CREATE XML SCHEMA COLLECTION Rekenserver.").expect("the script creates it")
        + "CREATE XML SCHEMA COLLECTION Rekenserver.".len();
    script[at..].split_whitespace().next().unwrap_or_default().to_owned()
}

/// What `broker/mssql/optional/schema_collection.sql` must hold: the three XSDs of `schemas/`
/// (without their XML declarations, which an nvarchar literal cannot carry) in one XML
/// SCHEMA COLLECTION, and the message types switched to VALID_XML against it.
pub fn schema_collection_script() -> String {
    let xsds = [
        include_str!("../../../../../schemas/LoonfactorBerekeningVraag.xsd"),
        include_str!("../../../../../schemas/LoonfactorBerekeningAntwoord.xsd"),
        include_str!("../../../../../schemas/RekenserverFout.xsd"),
    ];
    let body: Vec<String> = xsds
        .iter()
        .map(|x| {
            let x = match x.find("?>") {
                Some(i) if x.starts_with("<?xml") => &x[i + 2..],
                _ => x,
            };
            without_identity_constraints(x.trim()).replace('\'', "''")
        })
        .collect();
    let xsd = body.join("\n");
    let name = collection_name_of(&xsd);
    let mut out = String::from(
        "-- sbworker on SQL Server, optional script (run by hand after the numbered ones): the\n\
         -- Vraag message type validated as VALID_XML against the XSDs of schemas/, in one XML\n\
         -- SCHEMA COLLECTION named with a hash of the XSDs. Running a newer version of this\n\
         -- script creates the new collection, moves the message type to it and drops the old\n\
         -- one, in one transaction, with the queues running. The Antwoord and the Fout stay\n\
         -- WELL_FORMED_XML: the collector validates them in code, where a failure is recorded;\n\
         -- a VALID_XML failure there would be discarded at the data queue, and its error sent\n\
         -- to the calculation side, which has ended its endpoint already.\n\
         -- Generated from schemas/ by sbworker::broker::mssql::schema_collection_script: do not\n\
         -- edit; a test fails when it is not current (SBWORKER_WRITE_GENERATED=1 rewrites it).\n\n\
         :on error exit\n",
    );
    out.push_str(SET_OPTIONS);
    out.push_str(&format!(
        "GO\nUSE [$(Database)];\nGO\n\n\
         IF NOT EXISTS (SELECT 1 FROM sys.xml_schema_collections\n\
         \x20              WHERE name = N'{name}' AND schema_id = SCHEMA_ID(N'Rekenserver'))\n\
         \x20   CREATE XML SCHEMA COLLECTION Rekenserver.{name} AS N'"
    ));
    out.push_str(&xsd);
    out.push_str("';\nGO\n\n");
    out.push_str(&format!(
        "SET XACT_ABORT ON;\n\
         BEGIN TRANSACTION;\n\
         ALTER MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] VALIDATION = VALID_XML WITH SCHEMA COLLECTION Rekenserver.{name};\n\
         ALTER MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Antwoord] VALIDATION = WELL_FORMED_XML;\n\
         ALTER MESSAGE TYPE [/Rekenserver/Fout] VALIDATION = WELL_FORMED_XML;\n\
         -- Earlier versions' collections, now referenced by no message type.\n\
         DECLARE @old sysname, @drop nvarchar(400);\n\
         DECLARE old_collections CURSOR LOCAL STATIC READ_ONLY FOR\n\
         \x20   SELECT c.name FROM sys.xml_schema_collections c\n\
         \x20    WHERE c.schema_id = SCHEMA_ID(N'Rekenserver') AND c.name <> N'{name}'\n\
         \x20      AND (c.name = N'LoonfactorBerekening' OR c.name LIKE N'LoonfactorBerekening[_]________________')\n\
         \x20      AND NOT EXISTS (SELECT 1 FROM sys.service_message_types t WHERE t.xml_collection_id = c.xml_collection_id)\n\
         \x20      AND NOT EXISTS (SELECT 1 FROM sys.columns k WHERE k.xml_collection_id = c.xml_collection_id)\n\
         \x20      AND NOT EXISTS (SELECT 1 FROM sys.parameters k WHERE k.xml_collection_id = c.xml_collection_id);\n\
         OPEN old_collections;\n\
         FETCH NEXT FROM old_collections INTO @old;\n\
         WHILE @@FETCH_STATUS = 0\n\
         BEGIN\n\
         \x20   SET @drop = N'DROP XML SCHEMA COLLECTION Rekenserver.' + QUOTENAME(@old) + N';';\n\
         \x20   EXEC sys.sp_executesql @drop;\n\
         \x20   FETCH NEXT FROM old_collections INTO @old;\n\
         END\n\
         CLOSE old_collections; DEALLOCATE old_collections;\n\
         COMMIT TRANSACTION;\n\
         GO\n"
    ));
    out
}

/// Runs the scripts against the server of `connection_string` (connected to
/// `master` or the target database; script 00 switches with USE), batch by batch, for
/// `side` (the sqlcmd variable `Side`, over any given in `vars`).
/// `allow_older_workers`: tell script 04 (session context) to replace the senders even
/// while a live worker reads an older Vraag contract.
pub async fn install(
    connection_string: &str,
    vars: &[(String, String)],
    side: Side,
    allow_older_workers: bool,
) -> Result<usize, BrokerError> {
    let c = Connection::parse(connection_string).map_err(|e| BrokerError {
        kind: ErrorKind::Other,
        number: 0,
        message: e.to_string(),
    })?;
    let mut client = connect(&c).await?;
    let env = |name: &str| std::env::var(name).ok();
    let mut given = vars.to_vec();
    given.push(("Side".to_owned(), side.name().to_owned()));
    let sqlcmd = SqlcmdVars { given: &given, env: &env };
    if allow_older_workers {
        client
            .simple_query(crate::sql::statements::mssql_install::ALLOW_OLDER_WORKERS.sql)
            .await
            .map_err(error_of)?
            .into_results()
            .await
            .map_err(error_of)?;
    }
    let mut n = 0;
    for (file, script) in SCRIPTS {
        let mut scripts = vec![(*file, script.to_string())];
        // The optional schema collection follows the numbered scripts (N2 of the fourth
        // review): where the Vraag's message type validates against a collection of an
        // earlier release, this release's Vraag (script 04's) would be discarded by it,
        // so the current collection is put in first (it accepts the older shapes too).
        if *file == "04_roster.sql" {
            let bound: Option<String> = client
                .simple_query(crate::sql::statements::mssql_install::BOUND_COLLECTION.sql)
                .await
                .map_err(error_of)?
                .into_row()
                .await
                .map_err(error_of)?
                .and_then(|r| r.get::<&str, _>(0).map(str::to_owned));
            if bound.is_some_and(|b| b != schema_collection_name()) {
                scripts.insert(0, ("optional/schema_collection.sql", schema_collection_script()));
            }
        }
        for (file, script) in scripts {
            let batches = sqlcmd_batches(&script, &sqlcmd).map_err(|m| BrokerError {
                kind: ErrorKind::Other,
                number: 0,
                message: format!("{file}: {m}"),
            })?;
            for b in batches {
                client
                    .simple_query(b)
                    .await
                    .map_err(|e| {
                        let mut be = error_of(e);
                        be.message = format!("{file}: {}", be.message);
                        be
                    })?
                    .into_results()
                    .await
                    .map_err(error_of)?;
                n += 1;
            }
        }
    }
    Ok(n)
}

/// sbworker's SQL Server database role for each job's PostgreSQL group role (the names
/// `sbworker install`'s role flags use).
pub fn role_for(postgres_role: &str) -> Option<&'static str> {
    Some(match postgres_role {
        "sbworker_worker" => "sbworker_role",
        "sbworker_sender" => "sbworker_sender_role",
        "sbworker_payroll" => "sbworker_payroll_role",
        "sbworker_housekeeping" => "sbworker_housekeeping_role",
        "sbworker_monitor" => "sbworker_monitor_role",
        _ => return None,
    })
}

/// Adds logins' users in `database` to sbworker's roles: (PostgreSQL group role name, as
/// the flags give it, login) pairs. A login without a user there gets one named as the
/// login. Returns (role, login, user) per grant.
pub async fn grant_roles(
    connection_string: &str,
    database: &str,
    grants: &[(&str, String)],
) -> Result<Vec<(&'static str, String, String)>, BrokerError> {
    let other = |message: String| BrokerError { kind: ErrorKind::Other, number: 0, message };
    if grants.is_empty() {
        return Ok(Vec::new());
    }
    let c = Connection::parse(connection_string).map_err(|e| other(e.to_string()))?;
    let mut client = connect(&c).await?;
    let mut out = Vec::new();
    for (role, login) in grants {
        let role = role_for(role).ok_or_else(|| other(format!("{role} is not one of sbworker's roles")))?;
        let row = client
            .query(crate::sql::statements::mssql_install::GRANT_ROLE.sql, &[&database, &role, &login.as_str()])
            .await
            .map_err(error_of)?
            .into_row()
            .await
            .map_err(error_of)?;
        // No row: the statement ran nothing (a name QUOTENAME cannot quote): not done.
        let user = row.and_then(|r| r.get::<&str, _>(0).map(str::to_owned)).ok_or_else(|| {
            other(format!("adding login {login} to {role} in database {database} did nothing (a name too long?)"))
        })?;
        out.push((role, login.clone(), user));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlcmd_scripts_split_at_go_and_take_their_variables() {
        let v = |pairs: &[(&str, &str)]| -> Vec<(String, String)> {
            pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
        };
        let script = ":on error exit\nUSE [$(Database)];\nGO\nSELECT 1;\n  go  \nSELECT '$(WorkerUser)'\n";
        let given = v(&[("Database", "Hr"), ("workeruser", "svc")]);
        let b = sqlcmd_batches(script, &SqlcmdVars::only(&given)).unwrap();
        assert_eq!(b, ["USE [Hr];\n", "SELECT 1;\n", "SELECT 'svc'\n"]);
        // A missing variable is an error naming it; nothing has a default.
        let e = sqlcmd_batches(script, &SqlcmdVars::only(&v(&[("Database", "Hr")]))).unwrap_err();
        assert!(e.contains("'WorkerUser' is not defined") && e.contains("--var WorkerUser="), "{e}");
        // sqlcmd's precedence: environment < -v < :setvar (from its line on).
        let env = |n: &str| (n == "Database").then(|| "FromEnv".to_owned());
        let only_env = SqlcmdVars { given: &[], env: &env };
        assert_eq!(sqlcmd_batches("USE [$(Database)]\n", &only_env).unwrap()[0], "USE [FromEnv]\n");
        let given = v(&[("Database", "FromV")]);
        let both = SqlcmdVars { given: &given, env: &env };
        assert_eq!(sqlcmd_batches("USE [$(Database)]\n", &both).unwrap()[0], "USE [FromV]\n");
        let b = sqlcmd_batches("SELECT '$(Database)'\nGO\n:setvar Database FromSetvar\nSELECT '$(Database)'\n", &both)
            .unwrap();
        assert_eq!(b, ["SELECT 'FromV'\n", "SELECT 'FromSetvar'\n"]);
        assert!(sqlcmd_batches(":r other.sql\n", &SqlcmdVars::only(&[])).is_err());
        // The scripts themselves need all four variables and set none.
        let all =
            v(&[("Database", "Payroll"), ("WorkerLogin", "sbworker"), ("WorkerUser", "sbworker"), ("Side", "both")]);
        for (file, s) in SCRIPTS {
            assert!(sqlcmd_batches(s, &SqlcmdVars::only(&all)).is_ok(), "{file}");
        }
        let e = sqlcmd_batches(SCRIPTS[0].1, &SqlcmdVars::only(&[])).unwrap_err();
        assert!(e.contains("'Database' is not defined"), "{e}");
    }

    #[test]
    fn a_side_is_named_as_the_sqlcmd_variable_and_its_regions_are_skipped_elsewhere() {
        for side in Side::ALL {
            assert_eq!(side.name().parse::<Side>(), Ok(side));
        }
        let e = "Calc".parse::<Side>().unwrap_err();
        assert!(e.contains("roster, calc or both"), "{e}");
        assert_eq!(
            region_sides("IF '$(Side)' NOT IN ('both', 'calc') SET NOEXEC ON;   -- a note"),
            Some(vec![Side::Both, Side::Calc])
        );
        assert_eq!(region_sides("IF '$(Side)' NOT IN ('both', 'kalk') SET NOEXEC ON;"), None);
        assert_eq!(region_sides("IF '$(Side)' NOT IN ('both', 'roster', 'calc')"), None);
        let script = "A\nIF '$(Side)' NOT IN ('calc') SET NOEXEC ON;\nB\nSET NOEXEC OFF;\nC\n";
        assert_eq!(for_side(script, Side::Calc), script);
        assert_eq!(
            for_side(script, Side::Both),
            "A\nIF '$(Side)' NOT IN ('calc') SET NOEXEC ON;\n\nSET NOEXEC OFF;\nC\n"
        );
        // The modules of each side: the roster's on its side only, the claim on the
        // calculation's, the bookkeeping and the status on both.
        let (both, roster, calc) = (modules(Side::Both), modules(Side::Roster), modules(Side::Calc));
        for m in ["rekenserver.sla_antwoord_op", "rooster.dienst_gewijzigd", "rekenserver.sweep"] {
            assert!(roster.contains(&m.to_owned()) && !calc.contains(&m.to_owned()), "{m}");
        }
        assert!(calc.contains(&"sbworker.claim_version".to_owned()));
        assert!(!roster.contains(&"sbworker.claim_version".to_owned()));
        for m in ["sbworker.count_attempts", "sbworker.status_report", "sbworker.replay_dead_letter"] {
            assert!(roster.contains(&m.to_owned()) && calc.contains(&m.to_owned()), "{m}");
        }
        assert_eq!(both.len(), roster.len() + 1, "both: the roster's and the claim");
    }
}

//! `sbworker calc`: a Vraag in, the Antwoord (or a RekenserverFout) out.

use std::io::{Read, Write};

use crate::contract::{self, Limits};
use crate::engine::{self, Tables};

/// What `calc` printed, for the exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Antwoord,
    Fout,
}

/// Reads a Vraag from `input` and writes the Antwoord XML to `out` and its warnings to
/// `err`, or the RekenserverFout XML to `out` and its reason to `err`. With `explain`,
/// the explanation (which ends with the warnings) goes to `err` instead, so `out` stays
/// one XML document.
pub fn run(
    input: &[u8],
    limits: &Limits,
    tables: &Tables,
    explain: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> std::io::Result<Outcome> {
    let fout = match contract::decode_vraag(input, limits) {
        Ok(v) => match engine::calculate(&v, tables, explain) {
            Ok(calc) => {
                match &calc.explanation {
                    Some(e) => write!(err, "{e}")?,
                    // The warnings are in the Antwoord; at a terminal they are said too
                    // (overtime no percentage is paid for, an unverified table, ...).
                    None => {
                        for w in &calc.antwoord.waarschuwingen {
                            writeln!(err, "sbworker calc: warning {}: {}", w.code, w.tekst)?;
                        }
                        // Said here and at the worker's start, not in every Antwoord.
                        if let Some(why) = tables.cao(&v.dienstverband.cao.code).and_then(|c| c.unverified.as_ref()) {
                            writeln!(
                                err,
                                "sbworker calc: warning: the rate table of CAO {} is not checked against its text: {why}",
                                v.dienstverband.cao.code
                            )?;
                        }
                    }
                }
                let xml = contract::encode_antwoord(&calc.antwoord);
                writeln!(out, "{xml}")?;
                return Ok(Outcome::Antwoord);
            }
            Err(e) => e.to_fout(Some(v.id)),
        },
        Err(e) => e.to_fout(),
    };
    writeln!(out, "{}", contract::encode_fout(&fout))?;
    // The Fout's message is the error's, with any character XML does not allow (quoted
    // from the input) replaced: no raw control character reaches the terminal either.
    writeln!(err, "sbworker calc: {} ({})", fout.error_message, fout.reden)?;
    Ok(Outcome::Fout)
}

/// Reads all of FILE, or standard input for `-`.
pub fn read_input(path: &str) -> std::io::Result<Vec<u8>> {
    let mut buf = Vec::new();
    if path == "-" {
        std::io::stdin().read_to_end(&mut buf)?;
    } else {
        buf = std::fs::read(path)?;
    }
    Ok(buf)
}

/// Loads the rate tables: the built-in ones, or those in `path`.
pub fn load_tables(path: Option<&std::path::Path>) -> anyhow::Result<Tables> {
    use anyhow::Context;
    match path {
        None => Ok(Tables::built_in()?),
        Some(p) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("cannot read rate tables {}", p.display()))?;
            Tables::from_toml(&text).with_context(|| format!("rate tables {} are not usable", p.display()))
        }
    }
}

/// `sbworker calc`: exit 0 with an Antwoord, 2 with a Fout.
pub fn main(a: crate::cli::args::CalcArgs) -> super::Outcome {
    let tables = load_tables(a.tables.as_deref())?;
    let input = read_input(&a.file).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", a.file))?;
    let limits = Limits { max_body_bytes: a.max_body_bytes, ..Limits::default() };
    let (mut out, mut err) = (std::io::stdout().lock(), std::io::stderr().lock());
    match run(&input, &limits, &tables, a.explain, &mut out, &mut err) {
        Ok(Outcome::Antwoord) => Ok(std::process::ExitCode::SUCCESS),
        Ok(Outcome::Fout) => Ok(std::process::ExitCode::from(2)),
        Err(e) => Err(anyhow::anyhow!("cannot write the answer: {e}").into()),
    }
}

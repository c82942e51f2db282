//! The one runtime-and-logging set-up every subcommand uses: a tokio runtime (one
//! thread for a short job, the machine's threads for a long-running one) and tracing to
//! stderr (text, coloured only on a terminal, or JSON), with a filter whose origin an
//! error names.

use anyhow::Context;

use crate::config::LogFormat;

/// Where the filter came from, for an error: `log.level` or `SBWORKER_LOG`.
pub struct Filter<'a> {
    pub filter: &'a str,
    pub origin: &'a str,
}

impl Filter<'static> {
    /// `SBWORKER_LOG` (a tracing filter), else `default`.
    pub fn from_env(default: &'static str) -> (String, &'static str) {
        (std::env::var("SBWORKER_LOG").unwrap_or_else(|_| default.to_owned()), "SBWORKER_LOG")
    }
}

/// Sets up tracing to stderr once (later calls keep the first set-up).
pub fn logging(filter: Filter<'_>, format: LogFormat) -> anyhow::Result<()> {
    let env_filter = tracing_subscriber::EnvFilter::try_new(filter.filter)
        .with_context(|| format!("{}: \"{}\" is not a tracing filter", filter.origin, filter.filter))?;
    // Colours only for a terminal: a file or a pipe gets plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).try_init(),
        LogFormat::Text => builder.try_init(),
    };
    Ok(())
}

/// A tokio runtime: `many` threads for a long-running job (the worker, the emulator,
/// the demo, the bench), one for a short one (install, export, selftest).
pub fn runtime(many: bool) -> anyhow::Result<tokio::runtime::Runtime> {
    let mut b =
        if many { tokio::runtime::Builder::new_multi_thread() } else { tokio::runtime::Builder::new_current_thread() };
    b.enable_all().build().context("starting the tokio runtime")
}

//! `sbworker install`: puts the broker scripts into a database.

use crate::broker::postgres;

/// Installs (or brings up to date) the PostgreSQL broker at `url`; returns a line to
/// print.
pub fn postgres(url: &str) -> anyhow::Result<String> {
    use anyhow::Context;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let versions = rt.block_on(postgres::install(url)).context("installing the PostgreSQL broker")?;
    Ok(format!("PostgreSQL broker installed (schema sb, scripts {versions:?}); running it again changes nothing"))
}

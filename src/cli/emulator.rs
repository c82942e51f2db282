//! `sbworker emulator`: the Service Broker emulator as a program: a TDS endpoint on
//! `--listen`, backed by the PostgreSQL broker at `--postgres` (or a throwaway cluster
//! with the broker, the calculation service and the roster installed), until SIGINT or
//! SIGTERM.

use anyhow::Context;

use std::sync::Arc;

use crate::emulator::server::tls::Tls;
use crate::emulator::server::{Credentials, Faults, start_tls};
use crate::pg_cluster::Cluster;
use crate::shutdown::Stop;

pub fn run(
    listen: std::net::SocketAddr,
    postgres: Option<String>,
    creds: Credentials,
    faults: Faults,
    browser: Option<(String, std::net::SocketAddr)>,
    tls_files: Option<(std::path::PathBuf, std::path::PathBuf)>,
) -> anyhow::Result<()> {
    // The certificate: the operator's, or one made now (its fingerprint is printed).
    let tls = match &tls_files {
        Some((cert, key)) => Tls::from_files(cert, key),
        None => Tls::generated(),
    }
    .map_err(anyhow::Error::msg)?;
    // Log lines go to stderr: refused clients, injected faults; SBWORKER_LOG (a tracing
    // filter, default `info`) shows more, e.g. `sbworker=debug` for refused batches.
    let (filter, origin) = super::runtime::Filter::from_env("info");
    super::runtime::logging(super::runtime::Filter { filter: &filter, origin }, crate::config::LogFormat::Text)?;
    let rt = super::runtime::runtime(true)?;
    rt.block_on(async move {
        let (_cluster, url) = match postgres {
            Some(url) => (None, url),
            None => {
                eprintln!("starting a throwaway PostgreSQL cluster ...");
                let cluster = Cluster::start(&["synchronous_commit=off"]).context("starting PostgreSQL")?;
                let url = cluster.create_database("sbworker_emulator").await?;
                crate::broker::postgres::install_with(&url, true).await.context("installing the broker")?;
                (Some(cluster), url)
            }
        };
        let (stop_tx, stop) = Stop::new();
        let fingerprint = tls.fingerprint.clone();
        let generated = tls_files.is_none().then(|| tls.certificate_pem.clone());
        let (addr, task) = start_tls(listen, url, creds.clone(), Arc::new(faults), Some(tls), stop.clone())
            .await
            .with_context(|| format!("cannot listen on {listen}"))?;
        if let Some((instance, at)) = browser {
            let socket =
                tokio::net::UdpSocket::bind(at).await.with_context(|| format!("cannot listen on {at} (UDP)"))?;
            let line = format!("SQL Server Browser on {at} (UDP) for instance {instance}: Server={}\\{instance}\n", addr.ip());
            let _ = std::io::Write::write_all(&mut std::io::stdout(), line.as_bytes());
            tokio::spawn(crate::emulator::browser::serve(socket, instance, addr.port(), stop));
        }
        let mut banner = format!(
            "Service Broker emulator on {addr}. Connect with:\n  Server=tcp:{},{};User Id={};Password=…;Encrypt=true;TrustServerCertificate=true\n  \
             (or Encrypt=false: a client that does not ask for TLS is served without it)\n\
             TLS certificate, SHA-256 fingerprint {fingerprint}\n",
            addr.ip(),
            addr.port(),
            creds.user
        );
        if let Some(pem) = generated {
            banner.push_str(&format!(
                "made at start for localhost and 127.0.0.1 (trust it as the CA, or use --tls-cert/--tls-key):\n{pem}"
            ));
        }
        // One write, and a reader that has gone away is no reason to stop serving (a
        // parent that read the first lines may close the pipe).
        let mut out = std::io::stdout().lock();
        let _ = std::io::Write::write_all(&mut out, banner.as_bytes()).and_then(|()| std::io::Write::flush(&mut out));
        drop(out);
        use tokio::signal::unix::{SignalKind, signal};
        let (mut term, mut int) = (signal(SignalKind::terminate())?, signal(SignalKind::interrupt())?);
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        let _ = stop_tx.send(true);
        let _ = task.await;
        Ok(())
    })
}

//! A small HTTP/1.1 endpoint for operations: `GET /metrics` (Prometheus text),
//! `/healthz` (the process is alive) and `/readyz` (every queue is being served). One
//! request per connection; anything else gets 404 or 405. Requests larger than 8 KiB
//! or slower than 5 s are dropped.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing::debug;

use super::Stop;
use super::metrics::Metrics;

/// Serves until `stop` fires.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, mut stop: Stop) {
    loop {
        let accepted = tokio::select! {
            _ = stop.stopped() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    if let Err(e) = tokio::time::timeout(Duration::from_secs(5), respond(stream, &metrics)).await {
                        debug!("http request timed out: {e}");
                    }
                });
            }
            Err(e) => debug!("http accept failed: {e}"),
        }
    }
}

async fn respond(mut stream: TcpStream, metrics: &Metrics) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = stream.read(&mut chunk).await?;
        if n == 0 || buf.len() + n > 8192 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let mut parts = head.lines().next().unwrap_or("").split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => {
            ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", metrics.encode())
        }
        ("GET", "/healthz") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/readyz") => match metrics.readiness() {
            Ok(()) => ("200 OK", "text/plain", "ready\n".to_owned()),
            Err(why) => ("503 Service Unavailable", "text/plain", format!("not ready\n{why}\n")),
        },
        (_, "/metrics" | "/healthz" | "/readyz") => ("405 Method Not Allowed", "text/plain", "GET only\n".to_owned()),
        _ => ("404 Not Found", "text/plain", "not found\n".to_owned()),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

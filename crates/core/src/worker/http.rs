//! The operations endpoint over HTTP/1.1: `GET /metrics` (OpenMetrics text), `/healthz`
//! (the process is alive) and `/readyz` (every queue is being served); anything else
//! gets 404, another method on these paths 405. axum routes, hyper serves each
//! connection: request heads larger than 8 KiB are refused, a head slower than 5 s is
//! dropped, and a connection lasts at most 30 s.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tracing::debug;

use super::Stop;
use super::metrics::Metrics;

/// How long a client may take to send a request's head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// How long one connection of the worker's endpoints may last, its request and response
/// included (one request per connection: no keep-alive, so the bound is never a
/// kept-alive connection's age). The web page gives its own (an action may take long).
pub const CONNECTION_LIMIT: Duration = Duration::from_secs(30);
/// The largest request head read (hyper's smallest buffer).
const HEAD_LIMIT: usize = 8192;

/// The routes, on `metrics`.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(openmetrics))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(readyz))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found\n") })
        .with_state(metrics)
}

async fn openmetrics(State(metrics): State<Arc<Metrics>>) -> Response {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], metrics.encode())
        .into_response()
}

async fn readyz(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.readiness() {
        Ok(()) => "ready\n".into_response(),
        Err(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready\n{why}\n")).into_response(),
    }
}

/// Serves `router` on `listener` until `stop` fires, each connection for at most
/// `connection_limit`.
pub async fn serve_router(listener: TcpListener, router: Router, connection_limit: Duration, mut stop: Stop) {
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new()).header_read_timeout(HEAD_TIMEOUT).max_buf_size(HEAD_LIMIT).keep_alive(false);
    loop {
        let accepted = tokio::select! {
            _ = stop.stopped() => return,
            a = listener.accept() => a,
        };
        match accepted {
            Ok((stream, _)) => {
                let service = TowerToHyperService::new(router.clone());
                let connection = http.serve_connection(TokioIo::new(stream), service);
                tokio::spawn(async move {
                    match tokio::time::timeout(connection_limit, connection).await {
                        Ok(Err(e)) => debug!("http connection ended: {e}"),
                        Err(_) => debug!("http connection closed after {} s", connection_limit.as_secs()),
                        Ok(Ok(())) => {}
                    }
                });
            }
            Err(e) => {
                // (Out of file descriptors, say: a pause, not a loop at full speed.)
                debug!("http accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

/// Serves the operations endpoints until `stop` fires.
pub async fn serve(listener: TcpListener, metrics: Arc<Metrics>, stop: Stop) {
    serve_router(listener, router(metrics), CONNECTION_LIMIT, stop).await;
}

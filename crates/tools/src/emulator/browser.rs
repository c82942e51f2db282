//! The emulator's SQL Server Browser: answers the resolution requests of MC-SQLR on a UDP
//! socket for one named instance, whose TCP port is the emulator's, so that a client
//! given `Server=host\INSTANCE` finds it as it would find a SQL Server's named instance.
//! Requests for another instance are ignored, as a browser does.

use tokio::net::UdpSocket;
use tracing::debug;

use crate::broker::mssql::browser::answer;
use crate::shutdown::Stop;

/// Serves `instance` (TCP `port`) on `socket` until `stop`.
pub async fn serve(socket: UdpSocket, instance: String, port: u16, mut stop: Stop) {
    let mut buf = vec![0u8; 1024];
    loop {
        tokio::select! {
            _ = stop.stopped() => return,
            got = socket.recv_from(&mut buf) => {
                let Ok((n, from)) = got else { continue };
                match answer(&buf[..n], "SBWORKER-EMULATOR", &instance, port) {
                    Some(reply) => {
                        let _ = socket.send_to(&reply, from).await;
                    }
                    None => debug!(%from, "browser request ignored"),
                }
            }
        }
    }
}

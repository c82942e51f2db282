//! The SQL Server Browser's resolution protocol (MC-SQLR), both ends of the one exchange
//! a client needs: a named instance (`Server=host\INSTANCE` without a port) is looked up
//! with a CLNT_UCAST_INST request (0x04, the instance name, a zero byte) to UDP port
//! 1434 of the host, and the SVR_RESP answer (0x05, a 2-byte little-endian length, then
//! `ServerName;…;InstanceName;…;IsClustered;…;Version;…;tcp;PORT;;`) gives the
//! instance's TCP port. A browser ignores a request for an instance it does not have, so
//! a request that gets no answer is sent again, and then given up with a message saying
//! what to check. The answering side ([`answer`]) serves the emulator.

use std::time::Duration;

use tokio::net::UdpSocket;

/// The SQL Server Browser's UDP port.
pub const BROWSER_PORT: u16 = 1434;

/// Tries per lookup, and how long each waits for its answer (MC-SQLR recommends a
/// client waits about a second).
const TRIES: u32 = 2;
const WAIT: Duration = Duration::from_secs(1);

/// The CLNT_UCAST_INST request for `instance`.
pub fn request(instance: &str) -> Vec<u8> {
    let mut r = Vec::with_capacity(instance.len() + 2);
    r.push(0x04);
    r.extend_from_slice(instance.as_bytes());
    r.push(0);
    r
}

/// The TCP port of `instance` in an SVR_RESP datagram; `None` when the answer is not an
/// SVR_RESP, does not name the instance, or gives it no TCP port (named pipes only).
pub fn tcp_port(response: &[u8], instance: &str) -> Option<u16> {
    if response.len() < 3 || response[0] != 0x05 {
        return None;
    }
    let size = u16::from_le_bytes([response[1], response[2]]) as usize;
    let data = std::str::from_utf8(response.get(3..3 + size.min(response.len() - 3))?).ok()?;
    // One instance's record per ";;"-terminated group of key;value pairs.
    data.split(";;").find_map(|record| {
        let fields: Vec<&str> = record.split(';').collect();
        let value =
            |key: &str| fields.chunks(2).find(|kv| kv[0].eq_ignore_ascii_case(key)).and_then(|kv| kv.get(1).copied());
        if !value("InstanceName")?.eq_ignore_ascii_case(instance) {
            return None;
        }
        value("tcp")?.parse().ok()
    })
}

/// Asks the browser at `host`:`browser_port` for the TCP port of `instance`.
pub async fn resolve(host: &str, browser_port: u16, instance: &str) -> Result<u16, String> {
    let what = format!("the SQL Server Browser at {host}:{browser_port} (UDP) for instance {instance}");
    // The host's first address, and a socket of its family.
    let to = tokio::net::lookup_host((host, browser_port))
        .await
        .map_err(|e| format!("cannot ask {what}: {e}"))?
        .next()
        .ok_or_else(|| format!("cannot ask {what}: the name has no address"))?;
    let socket = UdpSocket::bind(if to.is_ipv6() { "[::]:0" } else { "0.0.0.0:0" })
        .await
        .map_err(|e| format!("cannot ask {what}: {e}"))?;
    socket.connect(to).await.map_err(|e| format!("cannot ask {what}: {e}"))?;
    let mut buf = vec![0u8; 65_535];
    for _ in 0..TRIES {
        socket.send(&request(instance)).await.map_err(|e| format!("cannot ask {what}: {e}"))?;
        match tokio::time::timeout(WAIT, socket.recv(&mut buf)).await {
            Ok(Ok(n)) => {
                return tcp_port(&buf[..n], instance).ok_or_else(|| {
                    format!("{what} answered, but gave no TCP port for it (is TCP enabled for the instance?)")
                });
            }
            // Nothing yet (a browser ignores an instance it does not have), or the port
            // is closed (ICMP unreachable): try again, then give up.
            Ok(Err(_)) | Err(_) => continue,
        }
    }
    Err(format!(
        "no answer from {what}: is the SQL Server Browser service running, UDP 1434 open in the firewall, and the \
         instance name right? Or give the port instead: Server=tcp:{host},PORT"
    ))
}

/// The answer a browser serving `instance` on TCP `port` (as `server`) gives to
/// `request`: to CLNT_UCAST_INST for that instance (any case), and to CLNT_UCAST_EX
/// (0x03, every instance); `None` for anything else, which a browser ignores.
pub fn answer(request: &[u8], server: &str, instance: &str, port: u16) -> Option<Vec<u8>> {
    let asked = match request.first()? {
        0x03 => None,
        0x04 => {
            let name = request[1..].split(|b| *b == 0).next()?;
            Some(std::str::from_utf8(name).ok()?)
        }
        _ => return None,
    };
    if asked.is_some_and(|a| !a.eq_ignore_ascii_case(instance)) {
        return None;
    }
    let data = format!("ServerName;{server};InstanceName;{instance};IsClustered;No;Version;16.0.1000.6;tcp;{port};;");
    let mut r = vec![0x05];
    r.extend_from_slice(&(data.len() as u16).to_le_bytes());
    r.extend_from_slice(data.as_bytes());
    Some(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_answers_are_read_as_mc_sqlr_writes_them() {
        assert_eq!(request("PAYROLL"), b"\x04PAYROLL\x00");
        let a = answer(&request("payroll"), "DB1", "PAYROLL", 50123).unwrap();
        assert_eq!(a[0], 0x05);
        assert_eq!(u16::from_le_bytes([a[1], a[2]]) as usize, a.len() - 3);
        assert_eq!(tcp_port(&a, "PAYROLL"), Some(50123));
        assert_eq!(tcp_port(&a, "OTHER"), None);
        assert!(answer(&request("OTHER"), "DB1", "PAYROLL", 50123).is_none(), "an unknown instance is ignored");
        assert!(answer(b"\x02", "DB1", "PAYROLL", 50123).is_none());
        assert_eq!(tcp_port(&answer(b"\x03", "DB1", "PAYROLL", 1).unwrap(), "payroll"), Some(1));
        // Several instances in one answer (CLNT_UCAST_EX); one without TCP.
        let data = "ServerName;DB1;InstanceName;A;IsClustered;No;Version;16.0;np;\\\\DB1\\pipe\\a;;\
                    ServerName;DB1;InstanceName;B;IsClustered;No;Version;16.0;tcp;1500;;";
        let mut many = vec![0x05];
        many.extend_from_slice(&(data.len() as u16).to_le_bytes());
        many.extend_from_slice(data.as_bytes());
        assert_eq!(tcp_port(&many, "b"), Some(1500));
        assert_eq!(tcp_port(&many, "A"), None, "named pipes only");
        assert_eq!(tcp_port(b"\x05\xff", "B"), None, "too short");
    }
}

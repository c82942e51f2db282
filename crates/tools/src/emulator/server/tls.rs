//! TLS as SQL Server negotiates it (MS-TDS 2.2.6.5 and 3.3.5.1): a client whose
//! PRELOGIN asks for encryption (ENCRYPT_ON or ENCRYPT_REQ) gets ENCRYPT_ON, then runs
//! the TLS handshake with its records carried in TDS PRELOGIN packets; once the handshake
//! is done, TLS runs straight over TCP and every TDS packet travels inside it. A client
//! that offers encryption without asking for it (ENCRYPT_OFF) gets ENCRYPT_OFF: the
//! login alone is encrypted when it runs the handshake, and the rest is plain. A TDS 8.0
//! client (`Encrypt=strict`) begins with TLS itself, ALPN `tds/8.0`, before PRELOGIN. The
//! certificate is the operator's (`--tls-cert`, `--tls-key`) or one made at start for
//! `localhost` and `127.0.0.1`, whose SHA-256 fingerprint is printed so a client can
//! trust it. rustls, as the rest of the project.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use rustls::ServerConfig;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::emulator::codec::packet_type;

/// The emulator's TLS: its server configuration and what to tell an operator.
#[derive(Clone)]
pub struct Tls {
    pub config: Arc<ServerConfig>,
    /// For TDS 8.0 (strict): TLS 1.2 or 1.3 before any TDS, ALPN `tds/8.0`.
    pub strict: Arc<ServerConfig>,
    /// The certificate's SHA-256 fingerprint, hex with colons.
    pub fingerprint: String,
    /// The certificate as PEM (for a client to trust: `ca` of tedious, `--cafile`).
    pub certificate_pem: String,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tls").field("fingerprint", &self.fingerprint).finish()
    }
}

impl Tls {
    /// A self-signed certificate for `localhost` and `127.0.0.1`, made now.
    pub fn generated() -> Result<Self, String> {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .map_err(|e| format!("cannot make a certificate: {e}"))?;
        let cert = made.cert.der().clone();
        let key = PrivateKeyDer::try_from(made.signing_key.serialize_der())
            .map_err(|e| format!("cannot use the key made: {e}"))?;
        Self::with(vec![cert], key, made.cert.pem())
    }

    /// The certificate chain and key in PEM files.
    pub fn from_files(cert: &std::path::Path, key: &std::path::Path) -> Result<Self, String> {
        let pem = std::fs::read_to_string(cert).map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
        let chain = CertificateDer::pem_slice_iter(pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--tls-cert {}: {e}", cert.display()))?;
        if chain.is_empty() {
            return Err(format!("--tls-cert {}: no PEM certificate in it", cert.display()));
        }
        let key = PrivateKeyDer::from_pem_file(key).map_err(|e| format!("--tls-key {}: {e}", key.display()))?;
        Self::with(chain, key, pem)
    }

    fn with(chain: Vec<CertificateDer<'static>>, key: PrivateKeyDer<'static>, pem: String) -> Result<Self, String> {
        let fingerprint = sha256(&chain[0]).iter().map(|b| format!("{b:02X}")).collect::<Vec<_>>().join(":");
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let build = |versions: &[&'static rustls::SupportedProtocolVersion]| {
            let mut config = ServerConfig::builder_with_provider(provider.clone())
                .with_protocol_versions(versions)
                .map_err(|e| e.to_string())?
                .with_no_client_auth()
                .with_single_cert(chain.clone(), key.clone_key())
                .map_err(|e| format!("the certificate and key cannot be used: {e}"))?;
            // No session resumption: an abbreviated handshake would cross the switch out
            // of PRELOGIN framing (and SQL Server's clients do not resume).
            config.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
            Ok::<_, String>(config)
        };
        // TDS 7: TLS 1.2, as SQL Server's PRELOGIN-wrapped handshake is specified.
        let config = build(&[&rustls::version::TLS12])?;
        let mut strict = build(&[&rustls::version::TLS13, &rustls::version::TLS12])?;
        strict.alpn_protocols = vec![b"tds/8.0".to_vec()];
        Ok(Self { config: Arc::new(config), strict: Arc::new(strict), fingerprint, certificate_pem: pem })
    }
}

impl Tls {
    /// The TDS 7 handshake: its records in PRELOGIN packets, then TLS straight over the
    /// connection.
    pub async fn accept_in_prelogin<S>(&self, stream: S) -> io::Result<tokio_rustls::server::TlsStream<Prelogin<S>>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let mut s = tokio_rustls::TlsAcceptor::from(self.config.clone()).accept(Prelogin::new(stream)).await?;
        s.get_mut().0.handshake_done();
        Ok(s)
    }
}

fn sha256(bytes: &[u8]) -> Vec<u8> {
    let suite = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256;
    match suite.tls13() {
        Some(s) => s.common.hash_provider.hash(bytes).as_ref().to_vec(),
        None => Vec::new(),
    }
}

/// The client's stream during and after the TLS handshake: while the handshake runs,
/// what TLS writes goes out in TDS PRELOGIN packets and what it reads comes out of
/// them; after it ([`Prelogin::handshake_done`]) bytes pass through untouched.
pub struct Prelogin<S> {
    inner: S,
    done: bool,
    /// The payload of the packet being read, and how far it has been read.
    incoming: Vec<u8>,
    read_at: usize,
    /// A packet header or payload partly read.
    header: [u8; 8],
    header_len: usize,
    payload_left: usize,
    /// What TLS wrote since the last flush, to go out as one PRELOGIN message.
    pending: Vec<u8>,
    /// Framed packets not yet written.
    outgoing: Vec<u8>,
    written: usize,
}

impl<S> Prelogin<S> {
    pub fn new(inner: S) -> Self {
        Self {
            inner,
            done: false,
            incoming: Vec::new(),
            read_at: 0,
            header: [0; 8],
            header_len: 0,
            payload_left: 0,
            pending: Vec::new(),
            outgoing: Vec::new(),
            written: 0,
        }
    }

    /// From now on TLS runs straight over the connection.
    pub fn handshake_done(&mut self) {
        self.done = true;
    }

    /// The connection itself, after a login-only encryption: nothing may be left read
    /// and not yet handed to TLS (a client sends nothing after its login until it is
    /// answered).
    pub fn into_inner(self) -> io::Result<S> {
        if self.read_at < self.incoming.len() || !self.outgoing.is_empty() || !self.pending.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "data after the encrypted login"));
        }
        Ok(self.inner)
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Prelogin<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.done && this.read_at >= this.incoming.len() {
            return Pin::new(&mut this.inner).poll_read(cx, buf);
        }
        while this.read_at >= this.incoming.len() {
            this.incoming.clear();
            this.read_at = 0;
            if this.header_len < 8 {
                let mut rb = ReadBuf::new(&mut this.header[this.header_len..]);
                ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
                let n = rb.filled().len();
                if n == 0 {
                    return Poll::Ready(Ok(()));
                }
                this.header_len += n;
                if this.header_len < 8 {
                    continue;
                }
                if this.header[0] != packet_type::PRELOGIN {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "a TLS handshake packet that is not PRELOGIN",
                    )));
                }
                let len = usize::from(u16::from_be_bytes([this.header[2], this.header[3]]));
                this.payload_left = len
                    .checked_sub(8)
                    .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "TDS packet shorter than its header"))?;
            }
            let mut chunk = vec![0u8; this.payload_left];
            let mut rb = ReadBuf::new(&mut chunk);
            ready!(Pin::new(&mut this.inner).poll_read(cx, &mut rb))?;
            let n = rb.filled().len();
            if n == 0 && this.payload_left > 0 {
                return Poll::Ready(Err(io::ErrorKind::UnexpectedEof.into()));
            }
            this.incoming.extend_from_slice(&chunk[..n]);
            this.payload_left -= n;
            if this.payload_left == 0 {
                this.header_len = 0;
            }
        }
        let n = buf.remaining().min(this.incoming.len() - this.read_at);
        buf.put_slice(&this.incoming[this.read_at..this.read_at + n]);
        this.read_at += n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> Prelogin<S> {
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.outgoing.len() {
            let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &self.outgoing[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.outgoing.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Prelogin<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = &mut *self;
        if this.done && this.pending.is_empty() {
            ready!(this.poll_drain(cx))?;
            return Pin::new(&mut this.inner).poll_write(cx, buf);
        }
        // A flight of handshake records goes out as one PRELOGIN message at the flush
        // (as SQL Server sends it: some drivers read a message, not a stream).
        this.pending.extend_from_slice(buf);
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if !this.pending.is_empty() {
            let payload = std::mem::take(&mut this.pending);
            let chunks: Vec<&[u8]> = payload.chunks(4096 - 8).collect();
            for (i, chunk) in chunks.iter().enumerate() {
                let last = i + 1 == chunks.len();
                this.outgoing.push(packet_type::PRELOGIN);
                this.outgoing.push(u8::from(last));
                this.outgoing.extend_from_slice(&u16::try_from(chunk.len() + 8).unwrap_or(u16::MAX).to_be_bytes());
                this.outgoing.extend_from_slice(&[0, 0, u8::try_from(i + 1).unwrap_or(0), 0]);
                this.outgoing.extend_from_slice(chunk);
            }
        }
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.inner).poll_shutdown(cx)
    }
}

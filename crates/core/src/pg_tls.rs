//! TLS for every PostgreSQL connection, as libpq's `sslmode` means it: `disable` (never),
//! `prefer` (the default: encrypted when the server offers it, the certificate not
//! checked), `require` (encrypted or no connection; the certificate checked against
//! `sslrootcert` when that is given, as libpq does), `verify-ca` (the certificate must
//! chain to `sslrootcert`), `verify-full` (and name the host connected to). `sslrootcert`
//! is a PEM file of CA certificates, or `system` for the operating system's roots;
//! `sslcert` and `sslkey` are a client certificate and its key (PEM). The TLS stack is
//! rustls (as tiberius's on the SQL Server side), through tokio-postgres-rustls.

use std::path::PathBuf;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio_postgres::tls::MakeTlsConnect;
use tokio_postgres::{Client, Connection, Socket};
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::connstr::{ParseError, TlsKeys};

/// The stream of a PostgreSQL connection made here (TLS or not).
pub type TlsStream = <MakeRustlsConnect as MakeTlsConnect<Socket>>::Stream;

/// libpq's `sslmode`, the values sbworker takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SslMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// Where the certificates that may sign the server's come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// None given: the certificate is not checked (prefer, require).
    None,
    /// A PEM file (`sslrootcert=/path`).
    File(PathBuf),
    /// The operating system's (`sslrootcert=system`).
    System,
}

/// How a connection protects itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tls {
    pub mode: SslMode,
    pub roots: Roots,
    /// `sslcert` and `sslkey`.
    pub client_cert: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("the connection string cannot be used: {0}")]
    ConnStr(#[from] ParseError),
    #[error("sslmode={0} is not supported: use disable, prefer, require, verify-ca or verify-full")]
    Mode(String),
    #[error(
        "sslmode={0} checks the server's certificate and needs the CA that signed it: set sslrootcert to a PEM file of CA certificates, or to 'system' for the system's"
    )]
    NoRoots(&'static str),
    #[error("sslcert and sslkey go together: set both, or neither")]
    HalfClientCert,
    #[error("cannot read {what} {path}: {why}")]
    File { what: &'static str, path: String, why: String },
    #[error("the TLS set-up failed: {0}")]
    Rustls(String),
}

/// Why a connection could not be made: its set-up, or the connection itself.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(transparent)]
    Setup(#[from] TlsError),
    #[error(transparent)]
    Connect(#[from] tokio_postgres::Error),
}

impl Tls {
    /// The TLS settings of a connection string's keys (libpq's defaults where absent).
    pub fn from_keys(k: &TlsKeys) -> Result<Self, TlsError> {
        let mode = match k.sslmode.as_deref().unwrap_or("prefer") {
            "disable" => SslMode::Disable,
            "prefer" => SslMode::Prefer,
            "require" => SslMode::Require,
            "verify-ca" => SslMode::VerifyCa,
            "verify-full" => SslMode::VerifyFull,
            other => return Err(TlsError::Mode(other.to_owned())),
        };
        let roots = match k.sslrootcert.as_deref() {
            None | Some("") => Roots::None,
            Some("system") => Roots::System,
            Some(path) => Roots::File(PathBuf::from(path)),
        };
        match (mode, &roots) {
            (SslMode::VerifyCa, Roots::None) => return Err(TlsError::NoRoots("verify-ca")),
            (SslMode::VerifyFull, Roots::None) => return Err(TlsError::NoRoots("verify-full")),
            _ => {}
        }
        let client_cert = match (k.sslcert.as_deref(), k.sslkey.as_deref()) {
            (None, None) => None,
            (Some(c), Some(k)) => Some((PathBuf::from(c), PathBuf::from(k))),
            _ => return Err(TlsError::HalfClientCert),
        };
        Ok(Self { mode, roots, client_cert })
    }

    /// Whether the server's certificate is checked against the roots (require with
    /// roots given checks it as verify-ca does, as in libpq).
    fn checks_chain(&self) -> bool {
        matches!(self.mode, SslMode::VerifyCa | SslMode::VerifyFull)
            || (self.mode == SslMode::Require && self.roots != Roots::None)
    }

    /// What will be used, in words (for `check-config` and the start-up log).
    pub fn describe(&self) -> String {
        let roots = match &self.roots {
            Roots::None => String::new(),
            Roots::File(p) => format!(" (CA certificates from {})", p.display()),
            Roots::System => " (the system's CA certificates)".into(),
        };
        let what = match self.mode {
            SslMode::Disable => "sslmode=disable: not encrypted".to_owned(),
            SslMode::Prefer if self.roots == Roots::None => {
                "sslmode=prefer: encrypted when the server offers TLS, else not; the server's certificate is not checked"
                    .to_owned()
            }
            SslMode::Prefer => format!(
                "sslmode=prefer: encrypted when the server offers TLS, else not; the server's certificate is not checked{roots}"
            ),
            SslMode::Require if !self.checks_chain() => {
                "sslmode=require: encrypted or no connection; the server's certificate is not checked".to_owned()
            }
            SslMode::Require => {
                format!("sslmode=require with sslrootcert: encrypted, the certificate checked as verify-ca{roots}")
            }
            SslMode::VerifyCa => {
                format!("sslmode=verify-ca: encrypted, the certificate signed by a trusted CA{roots}")
            }
            SslMode::VerifyFull => format!(
                "sslmode=verify-full: encrypted, the certificate signed by a trusted CA and naming the host{roots}"
            ),
        };
        match &self.client_cert {
            Some((c, _)) => format!("{what}; client certificate {}", c.display()),
            None => what,
        }
    }

    /// The modification times of the certificate files these settings name (`None` for
    /// one that cannot be read now).
    fn file_times(&self) -> Vec<Option<std::time::SystemTime>> {
        let mut files: Vec<&std::path::Path> = Vec::new();
        if let Roots::File(p) = &self.roots {
            files.push(p);
        }
        if let Some((cert, key)) = &self.client_cert {
            files.push(cert);
            files.push(key);
        }
        files.iter().map(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok()).collect()
    }

    /// The rustls connector of these settings.
    pub fn connector(&self) -> Result<MakeRustlsConnect, TlsError> {
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let builder = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| TlsError::Rustls(e.to_string()))?;
        let verifier: Arc<dyn ServerCertVerifier> = if self.checks_chain() {
            let roots = Arc::new(self.root_store()?);
            let webpki = WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
                .build()
                .map_err(|e| TlsError::Rustls(e.to_string()))?;
            if self.mode == SslMode::VerifyFull { webpki } else { Arc::new(ChainOnly(webpki)) }
        } else {
            Arc::new(AcceptAny(provider))
        };
        let builder = builder.dangerous().with_custom_certificate_verifier(verifier);
        let config = match &self.client_cert {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = read_certs(cert, "sslcert")?;
                let key = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::File {
                    what: "sslkey",
                    path: key.display().to_string(),
                    why: e.to_string(),
                })?;
                builder.with_client_auth_cert(chain, key).map_err(|e| TlsError::Rustls(e.to_string()))?
            }
        };
        Ok(MakeRustlsConnect::new(config))
    }

    fn root_store(&self) -> Result<RootCertStore, TlsError> {
        let mut store = RootCertStore::empty();
        match &self.roots {
            Roots::None => {}
            Roots::File(path) => {
                for c in read_certs(path, "sslrootcert")? {
                    store.add(c).map_err(|e| TlsError::File {
                        what: "sslrootcert",
                        path: path.display().to_string(),
                        why: e.to_string(),
                    })?;
                }
            }
            Roots::System => {
                let found = rustls_native_certs::load_native_certs();
                let (added, _) = store.add_parsable_certificates(found.certs);
                if added == 0 {
                    return Err(TlsError::File {
                        what: "sslrootcert",
                        path: "system".into(),
                        why: "no CA certificate found in the system's store".into(),
                    });
                }
            }
        }
        Ok(store)
    }
}

fn read_certs(path: &std::path::Path, what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let file_error = |why: String| TlsError::File { what, path: path.display().to_string(), why };
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(e.to_string()))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(e.to_string()))?;
    if certs.is_empty() {
        return Err(file_error("no PEM certificate in it".into()));
    }
    Ok(certs)
}

/// A connection string's tokio-postgres configuration and TLS settings.
pub fn config(url: &str) -> Result<(tokio_postgres::Config, Tls), TlsError> {
    let (config, keys) = crate::connstr::postgres_parts(url)?;
    Ok((config, Tls::from_keys(&keys)?))
}

/// A PostgreSQL database to connect to, resolved once: the connection string parsed,
/// its TLS settings read, the certificate files loaded and the rustls connector built.
/// Every connection of a process to the same database reuses it (cloning is cheap). The
/// certificate files are watched, not trusted for ever: at each new connection their
/// modification times are compared with those the connector was built from, and a
/// renewed `sslcert`, `sslkey` or `sslrootcert` file is loaded again (the system's
/// store, `sslrootcert=system`, is read once).
#[derive(Clone)]
pub struct Endpoint {
    config: tokio_postgres::Config,
    tls: Tls,
    masked: String,
    connector: Arc<std::sync::Mutex<Built>>,
}

/// A connector and the modification times of the files it was built from.
struct Built {
    connector: MakeRustlsConnect,
    files: Vec<Option<std::time::SystemTime>>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint").field("url", &self.masked).field("tls", &self.tls).finish()
    }
}

impl Endpoint {
    /// Resolves a connection string (a libpq URL or key=value string).
    pub fn new(url: &str) -> Result<Self, TlsError> {
        let (config, tls) = config(url)?;
        let files = tls.file_times();
        let connector = tls.connector()?;
        Ok(Self {
            config,
            tls,
            masked: crate::connstr::mask(url),
            connector: Arc::new(std::sync::Mutex::new(Built { connector, files })),
        })
    }

    /// The connector, built again first when a certificate file has changed since.
    fn connector(&self) -> Result<MakeRustlsConnect, TlsError> {
        let now = self.tls.file_times();
        let mut built = self.connector.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if built.files != now {
            // A file being written may not read yet: the error fails this connection,
            // and the next one tries again.
            built.connector = self.tls.connector()?;
            built.files = now;
        }
        Ok(built.connector.clone())
    }

    /// Connects. The connection must be spawned (or polled) for the client to work.
    pub async fn connect(&self) -> Result<(Client, Connection<Socket, TlsStream>), ConnectError> {
        let connector = self.connector()?;
        Ok(self.config.connect(connector).await?)
    }

    /// How connections protect themselves.
    pub fn tls(&self) -> &Tls {
        &self.tls
    }

    /// The connection string with its secrets masked.
    pub fn masked(&self) -> &str {
        &self.masked
    }
}

/// Connects as the connection string says, TLS included (for a one-off connection; a
/// process that connects again and again keeps an [`Endpoint`]). The connection must be
/// spawned (or polled) for the client to work.
pub async fn connect(url: &str) -> Result<(Client, Connection<Socket, TlsStream>), ConnectError> {
    Endpoint::new(url)?.connect().await
}

/// `require` and `prefer` without roots, as libpq: the channel is encrypted, the
/// certificate not checked (its signatures over the handshake are).
#[derive(Debug)]
struct AcceptAny(Arc<CryptoProvider>);

impl ServerCertVerifier for AcceptAny {
    fn verify_server_cert(
        &self,
        _: &CertificateDer<'_>,
        _: &[CertificateDer<'_>],
        _: &ServerName<'_>,
        _: &[u8],
        _: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain must lead to a trusted CA; the name in the certificate is not
/// compared with the host.
#[derive(Debug)]
struct ChainOnly(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for ChainOnly {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self.0.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(mode: Option<&str>, root: Option<&str>) -> TlsKeys {
        TlsKeys { sslmode: mode.map(Into::into), sslrootcert: root.map(Into::into), ..TlsKeys::default() }
    }

    #[test]
    fn sslmode_as_libpq_means_it() {
        let t = Tls::from_keys(&keys(None, None)).unwrap();
        assert_eq!((t.mode, t.checks_chain()), (SslMode::Prefer, false), "libpq's default");
        assert!(!Tls::from_keys(&keys(Some("require"), None)).unwrap().checks_chain());
        assert!(Tls::from_keys(&keys(Some("require"), Some("/ca.pem"))).unwrap().checks_chain(), "libpq: as verify-ca");
        assert_eq!(Tls::from_keys(&keys(Some("verify-full"), Some("system"))).unwrap().roots, Roots::System);
        let e = Tls::from_keys(&keys(Some("verify-full"), None)).unwrap_err().to_string();
        assert!(e.contains("set sslrootcert"), "{e}");
        let e = Tls::from_keys(&keys(Some("allow"), None)).unwrap_err().to_string();
        assert!(e.contains("sslmode=allow is not supported"), "{e}");
        let half = TlsKeys { sslcert: Some("/c.pem".into()), ..TlsKeys::default() };
        assert!(matches!(Tls::from_keys(&half), Err(TlsError::HalfClientCert)));
    }
}

//! TLS to PostgreSQL as libpq's `sslmode` means it, against a cluster of this test module
//! started with `ssl=on` and certificates the test makes (a CA, a server certificate for
//! `localhost` and 127.0.0.1, a client certificate for a login that must show one), and
//! against the plain test cluster (no TLS).

use std::path::PathBuf;
use std::sync::OnceLock;

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose};
use sbworker::broker::postgres::Session;
use sbworker::pg_cluster::Cluster;

use crate::common::calc::TempDir;

/// The certificates, as PEM files in a directory of this test process.
struct Pki {
    _dir: TempDir,
    ca: PathBuf,
    other_ca: PathBuf,
    client_cert: PathBuf,
    client_key: PathBuf,
}

struct TlsServer {
    cluster: Cluster,
    pki: Pki,
}

/// A CA; its issuer, and its certificate as PEM.
fn ca(name: &str) -> (Issuer<'static, KeyPair>, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, name);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    let pem = params.self_signed(&key).unwrap().pem();
    (Issuer::new(params, key), pem)
}

/// A certificate signed by `issuer` (names: its subject alternative names; `cn` its
/// common name): the certificate and the key, as PEM.
fn leaf(issuer: &Issuer<'static, KeyPair>, names: &[&str], cn: &str) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, cn);
    (params.signed_by(&key, issuer).unwrap().pem(), key.serialize_pem())
}

fn server() -> &'static TlsServer {
    static SERVER: OnceLock<TlsServer> = OnceLock::new();
    SERVER.get_or_init(|| {
        let (issuer, ca_pem) = ca("sbworker test CA");
        let (_, other_ca_pem) = ca("another CA");
        let (server_cert, server_key) = leaf(&issuer, &["localhost", "127.0.0.1"], "localhost");
        let (client_cert, client_key) = leaf(&issuer, &[], "certuser");
        // certuser must show a certificate (over TLS, and only over TLS); everyone else
        // is trusted, with or without TLS.
        let hba = "local all all trust\n\
                   hostnossl all certuser 127.0.0.1/32 reject\n\
                   hostssl all certuser 127.0.0.1/32 cert\n\
                   host all all 127.0.0.1/32 trust\n";
        let cluster = Cluster::start_with_files(
            &["ssl=on", "ssl_cert_file=server.crt", "ssl_key_file=server.key", "ssl_ca_file=ca.crt"],
            &[
                ("server.crt", server_cert.as_bytes(), 0o644),
                ("server.key", server_key.as_bytes(), 0o600),
                ("ca.crt", ca_pem.as_bytes(), 0o644),
                ("pg_hba.conf", hba.as_bytes(), 0o600),
            ],
        )
        .expect("a PostgreSQL cluster with TLS");
        crate::common::pg::stop_when_done(&cluster);
        let dir = TempDir::new("pki");
        let write = |name: &str, pem: &str| {
            let p = dir.0.join(name);
            std::fs::write(&p, pem).unwrap();
            p
        };
        let pki = Pki {
            ca: write("ca.crt", &ca_pem),
            other_ca: write("other-ca.crt", &other_ca_pem),
            client_cert: write("client.crt", &client_cert),
            client_key: write("client.key", &client_key),
            _dir: dir,
        };
        TlsServer { cluster, pki }
    })
}

/// Connects with `url` and tells whether the session is encrypted, or the error.
async fn encrypted(url: &str) -> Result<bool, String> {
    let (client, conn) = sbworker::pg_tls::connect(url).await.map_err(|e| chain(&e))?;
    tokio::spawn(conn);
    let row = client
        .query_one("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()", &[])
        .await
        .map_err(|e| e.to_string())?;
    Ok(row.get(0))
}

/// An error with its causes.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut cause = e.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn tls_url(extra: &str) -> String {
    format!("{} {extra}", server().cluster.url("postgres"))
}

#[tokio::test]
async fn verify_full_connects_with_the_ca_and_is_refused_a_wrong_host_or_another_ca() {
    let pki = &server().pki;
    let ca = pki.ca.display();
    // The certificate names 127.0.0.1 (the host of the cluster's URL) and localhost.
    assert_eq!(encrypted(&tls_url(&format!("sslmode=verify-full sslrootcert={ca}"))).await, Ok(true));
    let port = server().cluster.port();
    let by_name =
        format!("host=localhost port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca}");
    assert_eq!(encrypted(&by_name).await, Ok(true));
    // The same server reached under a name its certificate does not carry.
    let wrong = format!(
        "host=db.example hostaddr=127.0.0.1 port={port} user=postgres dbname=postgres sslmode=verify-full sslrootcert={ca}"
    );
    let e = encrypted(&wrong).await.unwrap_err();
    assert!(e.contains("invalid peer certificate") && e.contains("db.example"), "{e}");
    // verify-ca checks the chain only: the name does not matter.
    assert_eq!(encrypted(&wrong.replace("verify-full", "verify-ca")).await, Ok(true));
    // Signed by a CA not given: refused, in both modes; and through the broker's own
    // connection, with the cause in its error.
    let other = tls_url(&format!("sslmode=verify-full sslrootcert={}", pki.other_ca.display()));
    let e = encrypted(&other).await.unwrap_err();
    assert!(e.contains("invalid peer certificate") && e.contains("UnknownIssuer"), "{e}");
    assert!(encrypted(&other.replace("verify-full", "verify-ca")).await.is_err());
    let e = match Session::open(&other).await {
        Ok(_) => panic!("connected with a CA that did not sign the server's certificate"),
        Err(e) => e,
    };
    assert_eq!(e.kind, sbworker::broker::ErrorKind::Connection);
    assert!(e.message.contains("invalid peer certificate"), "{}", e.message);
    // libpq's require with a root file checks the chain as verify-ca does.
    assert!(encrypted(&other.replace("verify-full", "require")).await.is_err());
}

/// A worker resolves its connection string once, but a renewed certificate file is
/// read again: the same endpoint refuses the server while its root file holds another
/// CA, and connects once the file holds the right one.
#[tokio::test]
async fn a_renewed_root_file_is_read_again_by_a_resolved_endpoint() {
    let pki = &server().pki;
    let dir = TempDir::new("renewed");
    let roots = dir.0.join("roots.crt");
    let put = |from: &std::path::Path, seconds: u64| {
        std::fs::copy(from, &roots).unwrap();
        // Distinct modification times, whatever the file system's clock granularity.
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(seconds);
        std::fs::File::options().write(true).open(&roots).unwrap().set_modified(at).unwrap();
    };
    put(&pki.other_ca, 1_700_000_000);
    let at = sbworker::pg_tls::Endpoint::new(&tls_url(&format!("sslmode=verify-full sslrootcert={}", roots.display())))
        .unwrap();
    let e = at.connect().await.map(|_| ()).unwrap_err();
    assert!(chain(&e).contains("UnknownIssuer"), "{}", chain(&e));
    put(&pki.ca, 1_700_000_100);
    let (client, conn) = at.connect().await.unwrap_or_else(|e| panic!("the renewed file: {}", chain(&e)));
    tokio::spawn(conn);
    assert_eq!(client.query_one("SELECT 1", &[]).await.unwrap().get::<_, i32>(0), 1);
    // A file that cannot be read now fails the connection, saying which; the next
    // connection reads it again.
    std::fs::remove_file(&roots).unwrap();
    let e = at.connect().await.map(|_| ()).unwrap_err();
    assert!(chain(&e).contains("sslrootcert"), "{}", chain(&e));
    put(&pki.ca, 1_700_000_200);
    assert!(at.connect().await.is_ok());
}

#[tokio::test]
async fn require_prefer_and_disable_as_libpq_means_them() {
    let plain = crate::common::pg::cluster().url("postgres");
    // require: encrypted, the certificate not checked; against a server without TLS,
    // no connection and a clear reason.
    assert_eq!(encrypted(&tls_url("sslmode=require")).await, Ok(true));
    let e = encrypted(&format!("{plain} sslmode=require")).await.unwrap_err();
    assert!(e.contains("server does not support TLS"), "{e}");
    // prefer (the default): encrypted where offered, plain where not.
    assert_eq!(encrypted(&tls_url("")).await, Ok(true));
    assert_eq!(encrypted(&plain).await, Ok(false));
    // disable: never.
    assert_eq!(encrypted(&tls_url("sslmode=disable")).await, Ok(false));
    // The URL form reads the same keys.
    let port = server().cluster.port();
    let url = format!(
        "postgresql://postgres@127.0.0.1:{port}/postgres?sslmode=verify-full&sslrootcert={}",
        server().pki.ca.display()
    );
    assert_eq!(encrypted(&url).await, Ok(true));
    // What sbworker does not support is refused before connecting, saying what to use.
    let e = encrypted(&tls_url("sslmode=allow")).await.unwrap_err();
    assert!(e.contains("sslmode=allow is not supported"), "{e}");
    let e = encrypted(&tls_url("sslmode=verify-full")).await.unwrap_err();
    assert!(e.contains("set sslrootcert"), "{e}");
    let e = encrypted(&tls_url("sslmode=verify-ca sslrootcert=/no/such/ca.pem")).await.unwrap_err();
    assert!(e.contains("cannot read sslrootcert /no/such/ca.pem"), "{e}");
}

#[tokio::test]
async fn a_client_certificate_is_shown_when_the_server_asks_for_one() {
    let pki = &server().pki;
    let port = server().cluster.port();
    let base = format!(
        "host=localhost port={port} user=certuser dbname=postgres sslmode=verify-full sslrootcert={}",
        pki.ca.display()
    );
    server().cluster.create_database("certs").await.expect("a database");
    let (admin, conn) = sbworker::pg_tls::connect(&server().cluster.url("postgres")).await.unwrap();
    tokio::spawn(conn);
    admin
        .batch_execute("DO $$ BEGIN CREATE ROLE certuser LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$")
        .await
        .unwrap();
    let with_cert = format!("{base} sslcert={} sslkey={}", pki.client_cert.display(), pki.client_key.display());
    assert_eq!(encrypted(&with_cert).await, Ok(true));
    let e = encrypted(&base).await.unwrap_err();
    assert!(e.contains("certificate"), "refused without one, saying why: {e}");
    let e = encrypted(&format!("{base} sslcert={}", pki.client_cert.display())).await.unwrap_err();
    assert!(e.contains("sslcert and sslkey go together"), "{e}");
}

#[tokio::test]
async fn check_config_says_what_tls_will_be_used() {
    let dir = TempDir::new("tls-config");
    let config = |connection: &str| {
        let path = dir.0.join(format!("{}.toml", uuid::Uuid::new_v4()));
        std::fs::write(
            &path,
            format!(
                "[broker]\nkind = \"postgres\"\nconnection = {}\n\n[queues.q]\nhandler = \"loonfactor-berekening\"\n",
                toml::Value::String(connection.to_owned())
            ),
        )
        .unwrap();
        path
    };
    let run = |path: PathBuf| async move {
        let out = crate::common::within(
            60,
            "check-config ends",
            tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
                .arg("check-config")
                .arg("--config")
                .arg(path)
                .output(),
        )
        .await
        .unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
    };
    let ca = server().pki.ca.display().to_string();
    let (code, out) = run(config(&format!("host=db.internal user=pay sslmode=verify-full sslrootcert={ca}"))).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("# PostgreSQL TLS: sslmode=verify-full") && out.contains(&ca), "{out}");
    let (code, out) = run(config("host=db.internal user=pay")).await;
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("sslmode=prefer: encrypted when the server offers TLS"), "{out}");
    // A CA file that is not there stops it, naming the key and the file.
    let (code, out) = run(config("host=db.internal user=pay sslmode=verify-ca sslrootcert=/no/ca.pem")).await;
    assert_eq!(code, Some(78), "a configuration error (EX_CONFIG): {out}");
    assert!(out.contains("broker.connection") && out.contains("/no/ca.pem"), "{out}");
}

//! The split install on PostgreSQL: the roster side and calculation sides in databases of
//! their own, on PostgreSQL servers of their own, joined by routes that logical
//! replication carries (`broker/postgres/008_routes.sql`, `sbworker link`).

use std::time::Duration;

use sbworker::broker::postgres::{install_side, route};
use sbworker::pg_cluster::Cluster;
use sbworker::transport::Side;
use tokio_postgres::Client;

use crate::common::calc::wait_until;

const VRAAG: &str = "/Rekenserver/LoonfactorBerekening/Vraag";
const ANTWOORD: &str = "/Rekenserver/LoonfactorBerekening/Antwoord";
const END_DIALOG: &str = "http://schemas.microsoft.com/SQL/ServiceBroker/EndDialog";
const DATA: &str = "/Rekenserver/LoonfactorBerekening/DataService";
const REKEN: &str = "/Rekenserver/LoonfactorBerekening/RekenService";
const CONTRACT: &str = "/Rekenserver/LoonfactorBerekening/DataContract";

/// A server of its own for one side: logical replication on.
pub async fn server() -> Cluster {
    tokio::task::spawn_blocking(|| {
        Cluster::start(&[
            "wal_level=logical",
            "max_replication_slots=10",
            "max_wal_senders=10",
            "synchronous_commit=off",
        ])
    })
    .await
    .unwrap()
    .expect("a PostgreSQL cluster with logical replication")
}

pub async fn client(url: &str) -> Client {
    let (c, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls).await.unwrap();
    tokio::spawn(conn);
    c
}

/// A database on `cluster` with the broker installed as `side`.
pub async fn side_db(cluster: &Cluster, name: &str, side: Side, roster: bool) -> String {
    let url = cluster.create_database(name).await.unwrap();
    install_side(&url, roster, Some(side)).await.unwrap();
    url
}

async fn count(c: &Client, sql: &str) -> i64 {
    c.query_one(sql, &[]).await.unwrap().get(0)
}

/// The messages waiting on `queue`, received and committed: (handle, type, body).
async fn receive_all(c: &Client, queue: &str) -> Vec<(uuid::Uuid, String, Vec<u8>)> {
    c.query("SELECT conversation_handle, message_type_name, coalesce(message_body, '') FROM sb.receive($1)", &[&queue])
        .await
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// Receives from `queue` (committing each) until `n` messages came, within a minute.
async fn receive_until(c: &Client, queue: &str, n: usize) -> Vec<(uuid::Uuid, String, Vec<u8>)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    while got.len() < n {
        assert!(tokio::time::Instant::now() < deadline, "{} of {n} messages on {queue} within a minute", got.len());
        let more = receive_all(c, queue).await;
        if more.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        got.extend(more);
    }
    got
}

/// A dialog begun on the roster side, a Vraag sent: it arrives on the calculation side's
/// queue, in a new endpoint there; the Antwoord sent back and the END reach the roster
/// side; the roster side's END closes the conversation on both sides, and no row of
/// either sb.transmission is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialog_crosses_to_another_server_and_back_and_ends_on_both_sides() {
    let (a, b) = (server().await, server().await);
    let roster = side_db(&a, "roster", Side::Roster, false).await;
    let calc = side_db(&b, "calc", Side::Calc, false).await;
    let link = route::link(&roster, &calc).await.unwrap();
    assert!(link.to_calculation.starts_with("reken_") && link.back.starts_with("data_"), "{link:?}");
    // Linking again changes nothing.
    assert_eq!(route::link(&roster, &calc).await.unwrap(), link);
    let (r, c) = (client(&roster).await, client(&calc).await);
    // Each side has its own service only.
    assert_eq!(count(&r, "SELECT count(*) FROM sb.service WHERE name LIKE '%RekenService'").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM sb.service WHERE name LIKE '%DataService'").await, 0);

    let h: uuid::Uuid =
        r.query_one("SELECT sb.begin_dialog($1, $2, $3, NULL, 600)", &[&DATA, &REKEN, &CONTRACT]).await.unwrap().get(0);
    r.execute("SELECT sb.send($1, $2, $3)", &[&h, &VRAAG, &b"<Vraag n=\"1\"/>".as_slice()]).await.unwrap();
    r.execute("SELECT sb.send($1, $2, $3)", &[&h, &VRAAG, &b"<Vraag n=\"2\"/>".as_slice()]).await.unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM sb.transmission").await, 0, "nothing stays in transit at the sender");

    let got = receive_until(&c, "loonfactorberekening_reken", 2).await;
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].2, b"<Vraag n=\"1\"/>", "in order");
    assert_eq!(got[1].2, b"<Vraag n=\"2\"/>", "in order");
    let far = got[0].0;
    let row = c.query_one("SELECT state, route FROM sb.endpoint WHERE handle = $1", &[&far]).await.unwrap();
    assert_eq!((row.get::<_, String>(0), row.get::<_, Option<String>>(1)), ("CO".into(), Some(link.back.clone())));
    c.execute("SELECT sb.send($1, $2, $3)", &[&far, &ANTWOORD, &b"<Antwoord/>".as_slice()]).await.unwrap();
    c.execute("SELECT sb.end_conversation($1)", &[&far]).await.unwrap();

    let back = receive_until(&r, "loonfactorberekening_data", 2).await;
    let types: Vec<&str> = back.iter().map(|m| m.1.as_str()).collect();
    assert_eq!(types, [ANTWOORD, END_DIALOG]);
    assert!(back.iter().all(|m| m.0 == h));
    r.execute("SELECT sb.end_conversation($1)", &[&h]).await.unwrap();
    assert_eq!(count(&r, "SELECT count(*) FROM sb.endpoint").await, 0, "the roster side's endpoint is gone");
    wait_until("the calculation side's endpoint is gone", || {
        let c = &c;
        async move { count(c, "SELECT count(*) FROM sb.endpoint").await == 0 }
    })
    .await;
    assert_eq!(count(&c, "SELECT count(*) FROM sb.transmission").await, 0);
    assert_eq!(count(&c, "SELECT count(*) FROM sb.transmission_error").await, 0);
}

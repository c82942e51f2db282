//! The protocol and the T-SQL the Service Broker emulator runs, over real TDS (tiberius,
//! and raw packets where a client would not send them): login (a wrong password,
//! strict, login-only and no encryption, a plain login after ENCRYPT_OFF), TLS and its
//! certificate, error tokens, random packets and garbage bytes, a named instance through
//! the SQL Server Browser, `sp_executesql` in a batch, XACT_ABORT's error semantics,
//! varchar as code page 1252, a T-SQL initiator's dialog, conversation timers, RECEIVE's
//! shapes, a group receive's lock waits, and the `sbworker emulator` command. The
//! drivers we did not write are in `emulator_clients`.

use std::sync::Arc;

use sbworker::broker::mssql::MssqlTransport;
use sbworker::contract::{Limits, decode_antwoord, message_types};
use sbworker::emulator::server::Faults;
use sbworker::worker::{RunOutcome, Stop};
use uuid::Uuid;

use crate::common::calc::{REKEN_QUEUE, calc_world, vraag_body, wait_until};
use crate::common::tds::{contains, emulator, emulator_with, recording_proxy, tds_worker, utf16};

#[tokio::test]
async fn a_wrong_password_is_login_failed_18456() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let wrong = conn.replace("Password=\"p;w\"\"d\"", "Password=nope");
    let transport = MssqlTransport::new(&wrong).unwrap();
    let e = match sbworker::transport::Transport::open(&transport).await {
        Ok(_) => panic!("logged in with a wrong password"),
        Err(e) => e,
    };
    assert_eq!(e.number, 18456, "{e}");
}

#[tokio::test]
async fn the_emulator_command_serves_a_throwaway_broker() {
    use tokio::io::AsyncBufReadExt;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_sbworker"))
        .args(["emulator", "--listen", "127.0.0.1:0", "--password", "pw"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let mut conn = None;
    while let Some(line) = lines.next_line().await.unwrap() {
        if let Some(c) = line.trim().strip_prefix("Server=") {
            conn = Some(format!("Server={}", c.replace("Password=…", "Password=pw")));
            break;
        }
    }
    let conn = conn.expect("the emulator prints its connection string");
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut session = sbworker::transport::Transport::open(&transport).await.unwrap();
    let state =
        sbworker::transport::Session::queue_state(&mut session, "dbo.loonfactorberekening_reken").await.unwrap();
    assert!(state.enabled);
    assert_eq!(state.messages, 0);
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id().unwrap() as i32, libc::SIGTERM) };
    assert_eq!(crate::common::within(60, "the process exits", child.wait()).await.unwrap().code(), Some(0));
}

/// A client that offers encryption (ENCRYPT_OFF) is answered ENCRYPT_OFF; one that then
/// sends its LOGIN7 in plain text instead of running the handshake is logged in all the
/// same (no client tested here does: pymssql's FreeTDS encrypts its login, tedious and
/// python-tds offer no encryption), rather than hanging on a handshake that never comes.
#[tokio::test]
async fn a_plain_login_after_encrypt_off_is_served() {
    use sbworker::emulator::codec::{self, packet_type};
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    codec::write_message(&mut s, packet_type::PRELOGIN, &codec::prelogin_request(codec::ENCRYPT_OFF), 4096)
        .await
        .unwrap();
    let (_, answer) = codec::read_message(&mut s).await.unwrap().unwrap();
    assert_eq!(codec::prelogin_encryption(&answer), Some(codec::ENCRYPT_OFF));
    codec::write_message(&mut s, packet_type::LOGIN7, &codec::login7_request("sbworker", "p;w\"d", "payroll"), 4096)
        .await
        .unwrap();
    let (_, tokens) =
        crate::common::within(10, "the login's answer", codec::read_message(&mut s)).await.unwrap().unwrap();
    assert!(tokens.contains(&0xAD), "a LOGINACK: {tokens:02X?}");
}

/// TLS as SQL Server negotiates it: a client that asks for encryption (tiberius with
/// `Encrypt=true`, as the worker's transport connects to SQL Server) gets it, with the
/// handshake inside PRELOGIN packets, and the worker answers over it; one that does not
/// trust the emulator's certificate (made at start, self-signed) is refused by its own
/// check, as with a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_asks_for_tls_gets_it_and_checks_the_certificate() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let untrusted = MssqlTransport::new(&conn.replace("Encrypt=false", "Encrypt=true")).unwrap();
    let e = match sbworker::transport::Transport::open(&untrusted).await {
        Ok(_) => panic!("a certificate nobody vouched for was trusted"),
        Err(e) => e,
    };
    assert_eq!(e.kind, sbworker::broker::ErrorKind::Connection, "{e}");
    let encrypted = conn.replace("Encrypt=false", "Encrypt=true;TrustServerCertificate=true");
    let (tx, run, _) = tds_worker(&encrypted, &url, |_| {});
    let mut c = sbworker::broker::mssql::connect(&sbworker::broker::mssql::Connection::parse(&encrypted).unwrap())
        .await
        .unwrap();
    let id = Uuid::new_v4();
    let sql = "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
         SELECT @h;";
    let text = String::from_utf8(vraag_body(id)).unwrap();
    let row = c.query(sql, &[&text.as_str()]).await.unwrap().into_row().await.unwrap().unwrap();
    let handle: Uuid = row.get(0).unwrap();
    let rows = c
        .query(
            "WAITFOR (RECEIVE conversation_handle, message_type_name, message_body
                      FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
            &[],
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    assert_eq!(rows[0].get::<Uuid, _>(0), Some(handle));
    assert_eq!(rows[0].get::<&str, _>(1), Some(message_types::ANTWOORD));
    let answer = decode_antwoord(rows[0].get::<&[u8], _>(2).unwrap(), &Limits::default()).unwrap();
    assert_eq!(answer.id, id);
    c.execute("END CONVERSATION @P1", &[&handle]).await.unwrap();
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// TLS as SQL Server negotiates it, seen on the wire through a proxy, with tiberius as
/// the client: TDS 8.0 (`Encrypt=strict`: TLS first, ALPN `tds/8.0`) encrypts everything;
/// a client that offers encryption without requiring it (tiberius's `EncryptionLevel::Off`,
/// ENCRYPT_OFF) has its login encrypted and the rest in plain text, as SQL Server does;
/// `Encrypt=false` (ENCRYPT_NOT_SUP) sends everything in plain text.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strict_login_only_and_no_encryption_are_negotiated_as_sql_server_does() {
    use sbworker::broker::mssql::Connection;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let login_name = utf16("sbworker");
    for (mode, level) in [
        ("strict", tiberius::EncryptionLevel::Strict),
        ("login only", tiberius::EncryptionLevel::Off),
        ("none", tiberius::EncryptionLevel::NotSupported),
    ] {
        let (proxy, sent) = recording_proxy(port).await;
        let mut c = Connection::parse(
            &conn
                .replace(&format!(",{port};"), &format!(",{proxy};"))
                .replace("Encrypt=false", "TrustServerCertificate=true"),
        )
        .unwrap();
        c.encrypt = level;
        let mut client = sbworker::broker::mssql::connect(&c).await.unwrap_or_else(|e| panic!("{mode}: {e}"));
        let row = client.simple_query("SELECT 42 AS answer").await.unwrap().into_row().await.unwrap().unwrap();
        assert_eq!(row.get::<i32, _>(0), Some(42), "{mode}");
        drop(client);
        let sent = sent.lock().unwrap().clone();
        let (login_plain, query_plain) = (contains(&sent, &login_name), contains(&sent, &utf16("SELECT 42 AS answer")));
        match mode {
            "strict" => {
                assert_eq!(sent.first(), Some(&0x16), "strict: a TLS handshake record comes first");
                assert!(!login_plain && !query_plain, "strict: nothing in plain text");
            }
            "login only" => assert!(!login_plain && query_plain, "login only: the login encrypted, the query not"),
            _ => assert!(login_plain && query_plain, "no encryption: both in plain text"),
        }
    }
}

#[tokio::test]
async fn error_tokens_from_the_wire_are_classified_by_number() {
    use sbworker::broker::ErrorKind;
    use sbworker::broker::mssql::error_of;
    let (url, s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let mut fails = async |sql: &str, params: &[&dyn tiberius::ToSql]| {
        let e = match c.query(sql, params).await {
            Ok(stream) => stream.into_results().await.expect_err(sql),
            Err(e) => e,
        };
        error_of(e)
    };
    let e = fails("END CONVERSATION @P1", &[&Uuid::new_v4()]).await;
    assert_eq!((e.number, e.kind), (8426, ErrorKind::ConversationNotFound), "{e}");
    let e = fails("SELECT name FROM sys.tables", &[]).await;
    assert_eq!(e.number, 50100, "{e}");
    assert!(e.message.contains("not supported by the emulator"), "{e}");
    let e = fails("SEND ON", &[]).await;
    assert_eq!(e.number, 102, "{e}");
    s.client().batch_execute(&format!("SELECT sb.alter_queue('{REKEN_QUEUE}', false)")).await.unwrap();
    let e = fails("RECEIVE * FROM dbo.loonfactorberekening_reken", &[]).await;
    assert_eq!((e.number, e.kind), (9617, ErrorKind::QueueDisabled), "{e}");
}

/// Writes `payload` as one TDS message of type `ty`.
async fn send_packet(w: &mut tokio::net::TcpStream, ty: u8, payload: &[u8]) -> std::io::Result<()> {
    sbworker::emulator::codec::write_message(w, ty, payload, 4096).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_packets_and_garbage_bytes_never_panic_the_emulator() {
    use sbworker::emulator::codec::{self, packet_type};
    use tokio::io::AsyncWriteExt;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port = crate::common::tds::port(&conn);
    let addr = ("127.0.0.1", port);
    let mut rng = sbworker::demo::rng::Rng::new(9);
    let types = [
        packet_type::SQL_BATCH,
        packet_type::RPC,
        packet_type::TRANSACTION_MANAGER,
        packet_type::ATTENTION,
        packet_type::LOGIN7,
        packet_type::PRELOGIN,
        0x00,
        0xFF,
    ];
    for round in 0..150 {
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let len = rng.below(600);
        let mut junk: Vec<u8> = (0..len).map(|_| rng.next_u64() as u8).collect();
        match round % 3 {
            // Raw garbage on a fresh connection.
            0 => {
                let _ = tcp.write_all(&junk).await;
            }
            // A well-framed PRELOGIN/LOGIN7 with a random payload.
            1 => {
                let _ = send_packet(&mut tcp, packet_type::PRELOGIN, &codec::prelogin_request(2)).await;
                let _ = codec::read_message(&mut tcp).await;
                if rng.chance(0.5) {
                    let good = codec::login7_request("sbworker", "p;w\"d", "payroll");
                    let at = rng.below(good.len());
                    junk = [&good[..at], &junk[..]].concat();
                }
                let _ = send_packet(&mut tcp, packet_type::LOGIN7, &junk).await;
            }
            // Logged in, then requests of every type with random payloads, some built on a
            // valid ALL_HEADERS prefix so the parser gets past it.
            _ => {
                let _ = send_packet(&mut tcp, packet_type::PRELOGIN, &codec::prelogin_request(2)).await;
                let _ = codec::read_message(&mut tcp).await;
                let login = codec::login7_request("sbworker", "p;w\"d", "payroll");
                send_packet(&mut tcp, packet_type::LOGIN7, &login).await.unwrap();
                codec::read_message(&mut tcp).await.unwrap().expect("login answered");
                for _ in 0..4 {
                    let ty = types[rng.below(types.len())];
                    let mut payload = if rng.chance(0.5) {
                        let mut h = 22u32.to_le_bytes().to_vec();
                        h.extend_from_slice(&18u32.to_le_bytes());
                        h.extend_from_slice(&2u16.to_le_bytes());
                        h.extend_from_slice(&[0; 12]);
                        h
                    } else {
                        Vec::new()
                    };
                    payload.extend((0..rng.below(300)).map(|_| rng.next_u64() as u8));
                    if send_packet(&mut tcp, ty, &payload).await.is_err() {
                        break;
                    }
                    if ty != packet_type::ATTENTION
                        && tokio::time::timeout(std::time::Duration::from_secs(10), codec::read_message(&mut tcp))
                            .await
                            .map_or(true, |r| r.is_err())
                    {
                        break;
                    }
                }
            }
        }
        drop(tcp);
    }
    // Still serving, and no connection task panicked.
    let transport = MssqlTransport::new(&conn).unwrap();
    let mut session = sbworker::transport::Transport::open(&transport).await.unwrap();
    let state = sbworker::transport::Session::queue_state(&mut session, REKEN_QUEUE).await.unwrap();
    assert!(state.enabled);
    assert_eq!(sbworker::emulator::server::connection_panics(), 0);
}

/// `Server=host\INSTANCE` without a port is found through the SQL Server
/// Browser's protocol (MC-SQLR over real UDP), as a Windows shop's named instance is;
/// an instance the browser does not have gets no answer, and the error says what to check.
#[tokio::test]
async fn a_named_instance_is_found_through_the_sql_server_browser() {
    use sbworker::broker::mssql::Connection;
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let port: u16 = conn.split("127.0.0.1,").nth(1).unwrap().split(';').next().unwrap().parse().unwrap();
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let browser_port = socket.local_addr().unwrap().port();
    let (_browser_stop, stop) = Stop::new();
    tokio::spawn(sbworker::emulator::browser::serve(socket, "PAYROLL".into(), port, stop));
    let named = conn.replace(&format!("tcp:127.0.0.1,{port}"), "127.0.0.1\\payroll");
    let mut c = Connection::parse(&named).unwrap();
    assert_eq!((c.instance.as_deref(), c.port_given), (Some("payroll"), false));
    c.browser_port = browser_port;
    let mut client = sbworker::broker::mssql::connect(&c).await.unwrap();
    let n: i32 = client
        .query("SELECT COUNT(*) FROM dbo.loonfactorberekening_reken", &[])
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap()
        .get(0)
        .unwrap();
    assert_eq!(n, 0);
    c.instance = Some("OTHER".into());
    let e = match sbworker::broker::mssql::connect(&c).await {
        Ok(_) => panic!("connected to an instance the browser does not have"),
        Err(e) => e,
    };
    assert!(e.message.contains("no answer from the SQL Server Browser") && e.message.contains("OTHER"), "{e}");
}

#[tokio::test]
async fn sp_executesql_written_in_a_batch_runs_with_its_parameters() {
    // As scripts and ORMs send it: `EXEC sp_executesql N'…', N'@a int, …', @a = …` in a
    // batch (tiberius here; pymssql in its own test). The statements see the parameters
    // (not the caller's variables), a Service Broker statement runs inside, and values by
    // position or OUTPUT parameters are refused as not supported, not as a syntax error.
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let rows = c
        .simple_query(
            "DECLARE @outer int = 5; \
             EXEC sp_executesql N'SELECT @a AS a, @b AS b', N'@a int, @b nvarchar(10)', @a = @outer, @b = N'x'; \
             EXEC sys.sp_executesql N'SELECT COUNT(*) AS n FROM dbo.loonfactorberekening_reken'; \
             SELECT @outer AS outer_after",
        )
        .await
        .unwrap()
        .into_results()
        .await
        .unwrap();
    assert_eq!(rows.len(), 3, "{rows:?}");
    assert_eq!((rows[0][0].get::<i32, _>(0), rows[0][0].get::<&str, _>(1)), (Some(5), Some("x")));
    assert_eq!(rows[1][0].get::<i32, _>(0), Some(0));
    assert_eq!(rows[2][0].get::<i32, _>(0), Some(5));
    // The error's number, as the transport reads it (`error_of`).
    let mut number = async |sql: &str| {
        let e = match c.simple_query(sql).await {
            Ok(s) => s.into_results().await.expect_err(sql),
            Err(e) => e,
        };
        sbworker::broker::mssql::error_of(e).number
    };
    // The caller's variables are not the statements': 137, as SQL Server says.
    assert_eq!(number("DECLARE @outer int = 5; EXEC sp_executesql N'SELECT @outer AS o'").await, 137);
    for refused in [
        "EXEC sp_executesql N'SELECT @a AS a', N'@a int', 1",
        "DECLARE @b int; EXEC sp_executesql N'SELECT @a AS a', N'@a int OUTPUT', @a = @b OUTPUT",
    ] {
        assert_eq!(number(refused).await, 50100, "{refused}");
    }
}

/// Errors inside a transaction as SQL Server has them: with XACT_ABORT OFF (its default)
/// the failing statement is undone alone and the transaction stays open, so a later
/// ROLLBACK undoes what came before and after it; with XACT_ABORT ON the error rolls the
/// whole transaction back; a batch that does not parse changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statements_error_undoes_the_statement_or_the_transaction_as_xact_abort_says() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let send = "DECLARE @h uniqueidentifier;
        BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
            TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
            ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
        SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<a/>')";
    async fn fails(c: &mut sbworker::broker::mssql::Tds, sql: &str) -> u32 {
        let r = match c.simple_query(sql).await {
            Ok(s) => s.into_results().await.map(|_| ()),
            Err(e) => Err(e),
        };
        match r {
            Err(tiberius::error::Error::Server(e)) => e.code(),
            other => panic!("{sql}: {other:?}"),
        }
    }
    async fn one(c: &mut sbworker::broker::mssql::Tds, sql: &str) -> i32 {
        c.simple_query(sql).await.unwrap().into_row().await.unwrap().unwrap().get::<i32, _>(0).unwrap()
    }
    let queued = "SELECT COUNT(*) FROM dbo.loonfactorberekening_reken";
    // XACT_ABORT OFF: the error ends its batch, the transaction goes on.
    c.simple_query("SET XACT_ABORT OFF; BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "SELECT @nowhere").await, 137);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1, "the transaction is still open");
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    // A statement that fails in the broker (an unknown conversation) is undone alone.
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    c.simple_query("ROLLBACK").await.unwrap().into_results().await.unwrap();
    assert_eq!(one(&mut c, queued).await, 0, "the ROLLBACK undid both sends");
    // And a COMMIT after a failed statement keeps what came before and after it: the
    // failing statement alone was undone (a transaction left aborted could not commit).
    c.simple_query("BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    c.simple_query("COMMIT").await.unwrap().into_results().await.unwrap();
    assert_eq!(one(&mut c, queued).await, 2, "both sends committed");
    // A batch refused as a whole before it runs changes nothing, even with XACT_ABORT
    // ON (SQL Server's compile errors).
    c.simple_query("SET XACT_ABORT ON; BEGIN TRANSACTION").await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "SELECT 1; SEND ON CONVERSATION").await, 102);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    // An undeclared variable is a compile error in SQL Server: the transaction stays.
    assert_eq!(fails(&mut c, "SELECT @nowhere").await, 137);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 1);
    // XACT_ABORT ON: a statement's error rolls the transaction back.
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    assert_eq!(fails(&mut c, "END CONVERSATION '00000000-0000-0000-0000-000000000001'").await, 8426);
    assert_eq!(one(&mut c, "SELECT @@TRANCOUNT").await, 0);
    assert_eq!(one(&mut c, queued).await, 2, "only the two committed before");
    // @@TRANCOUNT as of the statement an IF is part of.
    let r = c
        .simple_query("BEGIN TRAN; IF @@TRANCOUNT <> 0 COMMIT; SELECT @@TRANCOUNT")
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(r.get::<i32, _>(0), Some(0), "the IF saw the open transaction and committed it");
    // With XACT_ABORT OFF a Service Broker error ends its statement only: the batch goes
    // on, and the SEND after it runs and commits on its own (autocommit).
    c.simple_query("SET XACT_ABORT OFF").await.unwrap().into_results().await.unwrap();
    let before = one(&mut c, queued).await;
    assert_eq!(fails(&mut c, &format!("END CONVERSATION '00000000-0000-0000-0000-000000000001'; {send}")).await, 8426);
    assert_eq!(one(&mut c, queued).await, before + 1, "the statement after the error ran");
    // An error that ends the batch (a conversion) does not let the next statement run.
    assert_eq!(fails(&mut c, &format!("END CONVERSATION 'not a handle'; {send}")).await, 8169);
    assert_eq!(one(&mut c, queued).await, before + 1, "the batch ended at the conversion error");
    // A '…' literal is varchar, kept as single bytes; an N'…' literal as UTF-16LE.
    for (literal, kept) in [("'<a/>'", b"<a/>".to_vec()), ("N'<a/>'", utf16("<a/>"))] {
        // The queue emptied first (a RECEIVE takes one conversation group at a time).
        while one(&mut c, queued).await > 0 {
            c.simple_query("RECEIVE message_body FROM dbo.loonfactorberekening_reken")
                .await
                .unwrap()
                .into_results()
                .await
                .unwrap();
        }
        c.simple_query(send.replace("(N'<a/>')", &format!("({literal})"))).await.unwrap().into_results().await.unwrap();
        let row = c
            .simple_query("RECEIVE TOP (1) message_body FROM dbo.loonfactorberekening_reken")
            .await
            .unwrap()
            .into_row()
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.get::<&[u8], _>(0), Some(&kept[..]), "{literal}");
    }
}

/// varchar as SQL Server keeps it: single bytes of code page 1252 (the collation's), a
/// character it lacks as `?`; a varchar variable's SEND puts those bytes in the queue;
/// `CAST(message_body AS VARCHAR(MAX))` in a RECEIVE reads them back, an EndDialog's
/// NULL body included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn varchar_values_are_single_bytes_of_code_page_1252() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let row = c
        .simple_query(
            "SELECT CAST(CAST(N'€ é' AS VARCHAR(10)) AS VARBINARY(10)), CAST(N'Ω' AS VARCHAR(10)), CAST(0x80 AS VARCHAR(5))",
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.get::<&[u8], _>(0), Some(&[0x80, b' ', 0xE9][..]), "code page 1252");
    assert_eq!(row.get::<&str, _>(1), Some("?"), "a character code page 1252 lacks");
    assert_eq!(row.get::<&str, _>(2), Some("€"), "byte 0x80 read as code page 1252");
    // A varchar variable's SEND, then the initiator ends the dialog: the target reads
    // the message and the EndDialog with CAST(message_body AS VARCHAR(MAX)).
    c.simple_query(
        "DECLARE @h uniqueidentifier, @b varchar(max) = '<a>tekst</a>';
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@b);
         END CONVERSATION @h;",
    )
    .await
    .unwrap()
    .into_results()
    .await
    .unwrap();
    let rows = c
        .simple_query(
            "RECEIVE message_type_name, message_body, CAST(message_body AS VARCHAR(MAX)) AS tekst
             FROM dbo.loonfactorberekening_reken",
        )
        .await
        .unwrap()
        .into_first_result()
        .await
        .unwrap();
    assert_eq!(rows.len(), 2, "the message and the EndDialog");
    assert_eq!(rows[0].get::<&[u8], _>(1), Some(&b"<a>tekst</a>"[..]), "single bytes in the queue");
    assert_eq!(rows[0].get::<&str, _>(2), Some("<a>tekst</a>"));
    assert_eq!(rows[1].get::<&str, _>(0), Some(sbworker::broker::system::END_DIALOG));
    assert_eq!(rows[1].get::<&str, _>(2), None, "an EndDialog has no body");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_initiator_begins_a_dialog_sends_and_receives_the_answer_over_tds() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let (tx, run, _) = tds_worker(&conn, &url, |_| {});
    let mut c = crate::common::tds::client(&conn).await;
    // The body in each form a T-SQL sender uses: varbinary UTF-8; NVARCHAR (UTF-16LE, no
    // byte-order mark); and as SQL Server keeps an `xml` value, as the roster triggers
    // send it (UTF-16LE with a byte-order mark).
    for form in
        ["varbinary utf-8", "nvarchar", "xml as utf-16 with a mark", "CAST(nvarchar AS xml)", "an xml parameter"]
    {
        let id = Uuid::new_v4();
        let text = String::from_utf8(vraag_body(id)).unwrap();
        let sql = "DECLARE @h uniqueidentifier;
             BEGIN DIALOG CONVERSATION @h
                 FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                 TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                 ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                 WITH ENCRYPTION = OFF;
             SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
             SELECT @h;";
        let result = match form {
            "varbinary utf-8" => c.query(sql, &[&text.as_bytes()]).await,
            "nvarchar" => c.query(sql, &[&text.as_str()]).await,
            "an xml parameter" => {
                // A parameter of type xml (TDS type 0xF1), as a client binding an xml value sends it.
                let xml = tiberius::xml::XmlData::new(text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\""));
                c.query(sql, &[&xml]).await
            }
            "CAST(nvarchar AS xml)" => {
                // As a trigger does: SEND ON CONVERSATION (@h) … (CAST(… AS xml)).
                let cast = sql
                    .replace("SEND ON CONVERSATION @h", "SEND ON CONVERSATION (@h)")
                    .replace("(@P1);", "(CAST(@P1 AS xml));");
                let text = text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\"");
                c.query(cast, &[&text.as_str()]).await
            }
            _ => {
                let mut b = vec![0xFF, 0xFE];
                b.extend(
                    text.replace("encoding=\"UTF-8\"", "encoding=\"UTF-16\"").encode_utf16().flat_map(u16::to_le_bytes),
                );
                c.query(sql, &[&b.as_slice()]).await
            }
        };
        let row = result.unwrap().into_row().await.unwrap().expect("the handle");
        let handle: Uuid = row.get(0).unwrap();
        let rows = c
            .query(
                "WAITFOR (RECEIVE TOP (10) conversation_handle, message_type_name, message_body
                            FROM dbo.loonfactorberekening_data), TIMEOUT 30000",
                &[],
            )
            .await
            .unwrap()
            .into_first_result()
            .await
            .unwrap();
        // The Antwoord, and the EndDialog the calculation sends with it (it ends its
        // side in the same transaction): both in one receive.
        let types: Vec<&str> = rows.iter().map(|r| r.get::<&str, _>(1).unwrap()).collect();
        assert_eq!(types, [message_types::ANTWOORD, sbworker::broker::system::END_DIALOG], "{form}");
        assert_eq!(rows[0].get::<Uuid, _>(0), Some(handle), "{form}");
        assert_eq!(rows[0].get::<&str, _>(1), Some(message_types::ANTWOORD), "{form}");
        let answer = decode_antwoord(rows[0].get::<&[u8], _>(2).unwrap(), &Limits::default()).unwrap();
        assert_eq!(answer.id, id, "{form}: the answer to this Vraag");
        assert!(!answer.mutaties.is_empty(), "{form}");
        c.execute("END CONVERSATION @P1", &[&handle]).await.unwrap();
    }
    tx.send(()).await.unwrap();
    assert_eq!(crate::common::within(60, "the worker drains", run).await.unwrap(), RunOutcome::Drained);
}

/// BEGIN CONVERSATION TIMER from a T-SQL client: the DialogTimer arrives on the side's
/// own queue once due, with sequence number 0; an unknown handle is refused (8426).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_t_sql_client_sets_a_conversation_timer_and_receives_its_dialog_timer_over_tds() {
    let (url, _s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    // No worker runs: the Vraag waits on the calculation's queue; the timer is the data
    // side's own.
    let row = c
        .query(
            "DECLARE @h uniqueidentifier;
             BEGIN DIALOG CONVERSATION @h
                 FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
                 TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
                 ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract]
                 WITH ENCRYPTION = OFF;
             SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (@P1);
             BEGIN CONVERSATION TIMER (@h) TIMEOUT = 3600;
             SELECT @h;",
            &[&vraag_body(Uuid::new_v4()).as_slice()],
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .expect("the handle");
    let handle: Uuid = row.get(0).unwrap();
    let receive = "WAITFOR (RECEIVE TOP (10) conversation_handle, message_type_name, message_sequence_number
                     FROM dbo.loonfactorberekening_data), TIMEOUT ";
    let rows = c.query(format!("{receive}100"), &[]).await.unwrap().into_first_result().await.unwrap();
    assert!(rows.is_empty(), "an hour away: nothing yet");
    // A new timeout, from a parameter: due at once.
    c.execute("BEGIN CONVERSATION TIMER (@P1) TIMEOUT = @P2", &[&handle, &0i32]).await.unwrap();
    let rows = c.query(format!("{receive}30000"), &[]).await.unwrap().into_first_result().await.unwrap();
    let got: Vec<(Uuid, &str, i64)> =
        rows.iter().map(|r| (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap())).collect();
    assert_eq!(got, [(handle, sbworker::broker::system::DIALOG_TIMER, 0)]);
    let e = c.execute("BEGIN CONVERSATION TIMER (@P1) TIMEOUT = 10", &[&Uuid::new_v4()]).await.unwrap_err();
    assert!(e.to_string().contains("8426") || e.to_string().contains("not found"), "{e}");
    c.execute("END CONVERSATION @P1 WITH CLEANUP", &[&handle]).await.unwrap();
}

/// `RECEIVE TOP (n) … WHERE conversation_handle = h` takes at most n of the dialog's
/// messages and leaves the rest queued (before, the emulator took them all and returned
/// n: the others were lost).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_of_one_conversation_takes_at_most_its_top_and_leaves_the_rest() {
    let (url, s) = calc_world().await;
    let (conn, _stop) = emulator(&url).await;
    let mut c = crate::common::tds::client(&conn).await;
    let send = "DECLARE @h uniqueidentifier;
         BEGIN DIALOG CONVERSATION @h FROM SERVICE [/Rekenserver/LoonfactorBerekening/DataService]
             TO SERVICE '/Rekenserver/LoonfactorBerekening/RekenService'
             ON CONTRACT [/Rekenserver/LoonfactorBerekening/DataContract] WITH ENCRYPTION = OFF;
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v1/>');
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v2/>');
         SEND ON CONVERSATION @h MESSAGE TYPE [/Rekenserver/LoonfactorBerekening/Vraag] (N'<v3/>');";
    c.simple_query(send).await.unwrap().into_results().await.unwrap();
    let target: uuid::Uuid =
        s.client().query_one("SELECT handle FROM sb.endpoint WHERE NOT is_initiator", &[]).await.unwrap().get(0);
    let mut seqs = Vec::new();
    for _ in 0..3 {
        let rows = c
            .query(
                "RECEIVE TOP (1) message_sequence_number FROM dbo.loonfactorberekening_reken
                  WHERE conversation_handle = @P1",
                &[&target],
            )
            .await
            .unwrap()
            .into_first_result()
            .await
            .unwrap();
        assert_eq!(rows.len(), 1, "one message a RECEIVE TOP (1)");
        seqs.push(rows[0].get::<i64, _>(0).unwrap());
    }
    assert_eq!(seqs, [1, 2, 3], "each message once, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_receive_waits_for_a_held_group_until_its_lock_timeout() {
    // The emulator runs `RECEIVE … WHERE conversation_group_id = g` as SQL Server most
    // likely does: a group another session holds is waited for, up to the connection's
    // LOCK_TIMEOUT (1222), or until that session's transaction ends (-1). The transport
    // relies on the bound (the conformance suite shows it going on with other groups).
    let (url, _s) = calc_world().await;
    let faults = Arc::new(Faults::default());
    let (conn, _stop) = emulator_with(&url, faults.clone()).await;
    crate::common::tds::send_vraag(&mut crate::common::tds::client(&conn).await).await;
    // Session A holds the group in an open transaction.
    let mut a = crate::common::tds::client(&conn).await;
    let g: Uuid = a
        .simple_query(
            "BEGIN TRANSACTION; DECLARE @g uniqueidentifier;
             WAITFOR (GET CONVERSATION GROUP @g FROM dbo.loonfactorberekening_reken), TIMEOUT 10000;
             SELECT @g AS g",
        )
        .await
        .unwrap()
        .into_row()
        .await
        .unwrap()
        .and_then(|r| r.get(0))
        .expect("a group");
    let mut b = crate::common::tds::client(&conn).await;
    let receive = "RECEIVE conversation_group_id FROM dbo.loonfactorberekening_reken WHERE conversation_group_id = @P1";
    for bound in ["SET LOCK_TIMEOUT 0", "SET LOCK_TIMEOUT 200"] {
        b.simple_query(bound).await.unwrap().into_results().await.unwrap();
        let e = match b.query(receive, &[&g]).await {
            Ok(stream) => stream.into_results().await.expect_err(bound),
            Err(e) => e,
        };
        assert_eq!(sbworker::broker::mssql::error_of(e).number, 1222, "{bound}");
    }
    assert_eq!(faults.group_lock_waits(), 2);
    // Without a bound it waits until A's transaction ends, then takes the group.
    b.simple_query("SET LOCK_TIMEOUT -1").await.unwrap().into_results().await.unwrap();
    let waiting =
        tokio::spawn(async move { b.query(receive, &[&g]).await.unwrap().into_first_result().await.unwrap().len() });
    wait_until("B's receive begins to wait", || async { faults.group_lock_waits() >= 3 }).await;
    assert!(!waiting.is_finished(), "B waits while A holds the group");
    a.simple_query("ROLLBACK TRANSACTION").await.unwrap().into_results().await.unwrap();
    assert_eq!(crate::common::within(30, "B's receive after A's rollback", waiting).await.unwrap(), 1);
}

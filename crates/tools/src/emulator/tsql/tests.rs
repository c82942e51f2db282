//! The recogniser against every statement form the worker, the docs and the clients send.

use super::*;

fn one(sql: &str) -> Statement {
    let mut v = parse_batch(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    assert_eq!(v.len(), 1, "{sql}: {v:?}");
    v.remove(0)
}

#[test]
fn receive_in_every_documented_shape() {
    let s = one("waitfor ( receive top (@P1) conversation_handle, message_body FROM [dbo].[q] ), timeout 500;");
    assert_eq!(
        s,
        Statement::Receive {
            waitfor: true,
            top: Some(Value::Var("@p1".into())),
            columns: vec![item("conversation_handle"), item("message_body")],
            queue: "dbo.q".into(),
            filter: None,
            timeout: Some(Value::Int(500)),
            into: None,
        }
    );
    match one("RECEIVE * FROM q WHERE conversation_group_id = @g") {
        Statement::Receive { waitfor: false, columns, filter: Some(Filter::Group(Value::Var(g))), .. } => {
            assert_eq!((columns, g), (vec![Column::Star], "@g".to_owned()));
        }
        other => panic!("{other:?}"),
    }
    // Comments anywhere; aliases in every documented form; conversions; variables.
    match one("/* a */ WAITFOR (RECEIVE TOP (1) message_body AS b -- c\n FROM q)") {
        Statement::Receive { columns, .. } => assert_eq!(columns, [aliased("message_body", "b")]),
        other => panic!("{other:?}"),
    }
    match one(
        "RECEIVE x = [message_type_name], q.conversation_handle h, CAST(message_body AS XML) AS body, CONVERT(xml, message_body) FROM q",
    ) {
        Statement::Receive { columns, .. } => assert_eq!(
            columns,
            [
                aliased("message_type_name", "x"),
                aliased("conversation_handle", "h"),
                Column::Item {
                    source: "message_body".into(),
                    cast: Some("xml".into()),
                    alias: Some("body".into()),
                    var: None
                },
                Column::Item { source: "message_body".into(), cast: Some("xml".into()), alias: None, var: None },
            ]
        ),
        other => panic!("{other:?}"),
    }
    match one("RECEIVE TOP(1) @h = conversation_handle, @b = message_body FROM q") {
        Statement::Receive { columns, .. } => {
            assert!(columns.iter().all(|c| matches!(c, Column::Item { var: Some(_), .. })), "{columns:?}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(parse_batch("RECEIVE @h = conversation_handle, message_body FROM q").unwrap_err().number, 141);
    assert_eq!(parse_batch("RECEIVE message_body + 1 FROM q").unwrap_err().number, 102);
}

fn item(c: &str) -> Column {
    Column::Item { source: c.into(), cast: None, alias: None, var: None }
}

fn aliased(c: &str, a: &str) -> Column {
    Column::Item { source: c.into(), cast: None, alias: Some(a.into()), var: None }
}

/// Every combination of a statement's optional clauses, each written in several
/// spellings (case, brackets, comments, line breaks, semicolons), parses to the
/// same statement.
fn each_spelling(parts: &[&[&str]], check: impl Fn(&str, &Statement)) {
    let mut texts = vec![String::new()];
    for alternatives in parts {
        texts = texts.iter().flat_map(|t| alternatives.iter().map(move |a| format!("{t} {a}"))).collect();
    }
    for t in &mut texts {
        if t.trim_start().starts_with("WAITFOR") {
            t.push_str(" )");
        }
    }
    for t in &texts {
        for shape in
            [t.clone(), t.to_lowercase(), format!("/* x */{}\n;", t.replace(' ', "\n  ")), format!(";;{t} -- end")]
        {
            let s = parse_batch(&shape).unwrap_or_else(|e| panic!("{shape}: {e}"));
            assert_eq!(s.len(), 1, "{shape}");
            check(t, &s[0]);
        }
    }
}

#[test]
fn every_documented_form_with_and_without_each_clause() {
    let mut seen = 0;
    each_spelling(
        &[
            &["RECEIVE", "WAITFOR ( RECEIVE", "WAITFOR(RECEIVE"],
            &["", "TOP (5)", "TOP(@n)"],
            &["*", "conversation_handle, message_body", "[message_type_name] AS t"],
            &["FROM q", "FROM [dbo].[q]", "FROM db.dbo.q"],
            &["", "WHERE conversation_group_id = @g", "WHERE conversation_handle=@h"],
        ],
        |text, s| {
            let Statement::Receive { waitfor, top, queue, filter, .. } = s else { panic!("{text}: {s:?}") };
            assert_eq!(*waitfor, text.to_uppercase().contains("WAITFOR"), "{text}");
            assert_eq!(top.is_some(), text.to_uppercase().contains("TOP"), "{text}");
            assert!(queue.ends_with('q'), "{text}");
            assert_eq!(filter.is_some(), text.to_uppercase().contains("WHERE"), "{text}");
        },
    );
    // A WAITFOR needs its closing parenthesis, then an optional TIMEOUT.
    for (tail, timeout) in [(")", false), ("), TIMEOUT 100", true), (") ,timeout @t", true)] {
        for head in ["WAITFOR (RECEIVE * FROM q", "WAITFOR (GET CONVERSATION GROUP @g FROM [q]"] {
            let sql = format!("{head}{tail}");
            match one(&sql) {
                Statement::Receive { timeout: t, .. } | Statement::GetConversationGroup { timeout: t, .. } => {
                    assert_eq!(t.is_some(), timeout, "{sql}")
                }
                other => panic!("{sql}: {other:?}"),
            }
            seen += 1;
        }
    }
    each_spelling(&[&["GET CONVERSATION GROUP @g"], &["FROM q", "FROM [dbo].[q]"]], |text, s| {
        assert!(matches!(s, Statement::GetConversationGroup { waitfor: false, .. }), "{text}")
    });
    each_spelling(
        &[
            &["BEGIN DIALOG @h", "BEGIN DIALOG CONVERSATION @h"],
            &["FROM SERVICE [//a/b]", "FROM SERVICE a"],
            &["TO SERVICE '//c/d'", "TO SERVICE N'//c/d'", "TO SERVICE @to"],
            &["ON CONTRACT [//x/c]", "ON CONTRACT c"],
            &[
                "",
                "WITH RELATED_CONVERSATION_GROUP = @g",
                "WITH LIFETIME = 600",
                "WITH ENCRYPTION = OFF",
                "WITH RELATED_CONVERSATION_GROUP = @g, LIFETIME = @l, ENCRYPTION = OFF",
            ],
        ],
        |text, s| {
            let Statement::BeginDialog { related_group, lifetime, encryption, .. } = s else { panic!("{text}") };
            let up = text.to_uppercase();
            assert_eq!(related_group.is_some(), up.contains("RELATED_CONVERSATION_GROUP"), "{text}");
            assert_eq!(lifetime.is_some(), up.contains("LIFETIME"), "{text}");
            assert_eq!(*encryption, up.contains("ENCRYPTION").then_some(false), "{text}");
        },
    );
    each_spelling(
        &[
            &["SEND ON CONVERSATION @h", "SEND ON CONVERSATION (@h)"],
            &["", "MESSAGE TYPE [//x/Vraag]", "MESSAGE TYPE t"],
            &["", "(@body)", "( N'<a/>' )", "(NULL)"],
        ],
        |text, s| {
            let Statement::Send { message_type, body, .. } = s else { panic!("{text}") };
            assert_eq!(message_type.is_some(), text.to_uppercase().contains("MESSAGE TYPE"), "{text}");
            assert_eq!(body.is_some(), text.matches('(').count() > usize::from(text.contains("(@h)")), "{text}");
        },
    );
    each_spelling(
        &[
            &["END CONVERSATION @h"],
            &["", "WITH CLEANUP", "WITH ERROR = 50001 DESCRIPTION = 'bad'", "WITH ERROR=@e DESCRIPTION=@d"],
        ],
        |text, s| {
            let Statement::EndConversation { error, cleanup, .. } = s else { panic!("{text}") };
            let up = text.to_uppercase();
            assert_eq!(*cleanup, up.contains("CLEANUP"), "{text}");
            assert_eq!(error.is_some(), up.contains("ERROR"), "{text}");
        },
    );
    each_spelling(&[&["MOVE CONVERSATION @h", "MOVE CONVERSATION (@h)"], &["TO @g", "TO (@g)"]], |text, s| {
        assert_eq!(
            s,
            &Statement::MoveConversation { handle: Value::Var("@h".into()), group: Value::Var("@g".into()) },
            "{text}"
        );
    });
    assert!(seen > 0);
}

#[test]
fn the_rest_of_the_statement_set() {
    assert!(matches!(
        one(
            "BEGIN DIALOG CONVERSATION @h FROM SERVICE [/a] TO SERVICE N'/b' ON CONTRACT [/c] WITH RELATED_CONVERSATION_GROUP = @g, LIFETIME = 60, ENCRYPTION = OFF"
        ),
        Statement::BeginDialog {
            related_group: Some(Value::Var(_)),
            lifetime: Some(Value::Int(60)),
            encryption: Some(false),
            ..
        }
    ));
    assert_eq!(
        one("SEND ON CONVERSATION @h MESSAGE TYPE [/x/Vraag] (@body)"),
        Statement::Send {
            handles: vec![Value::Var("@h".into())],
            message_type: Some("/x/Vraag".into()),
            body: Some(Value::Var("@body".into()))
        }
    );
    assert_eq!(
        one("end conversation @h with error = 50001 description = 'it''s wrong'"),
        Statement::EndConversation {
            handle: Value::Var("@h".into()),
            error: Some((Value::Int(50001), Value::AnsiStr("it's wrong".into()))),
            cleanup: false
        }
    );
    assert!(matches!(one("END CONVERSATION @h WITH CLEANUP"), Statement::EndConversation { cleanup: true, .. }));
    assert!(matches!(one("MOVE CONVERSATION @h TO @g"), Statement::MoveConversation { .. }));
    assert_eq!(
        one("begin conversation timer (@h) timeout = 120"),
        Statement::BeginConversationTimer { handle: Value::Var("@h".into()), timeout: Value::Int(120) }
    );
    assert!(matches!(
        one("BEGIN CONVERSATION TIMER ( @h ) TIMEOUT = @t"),
        Statement::BeginConversationTimer { timeout: Value::Var(_), .. }
    ));
    assert!(matches!(
        one("WAITFOR (GET CONVERSATION GROUP @g FROM q), TIMEOUT @t"),
        Statement::GetConversationGroup { waitfor: true, timeout: Some(_), .. }
    ));
    assert_eq!(one("BEGIN TRAN"), Statement::Transaction(Tran::Begin));
    assert_eq!(one("commit transaction;"), Statement::Transaction(Tran::Commit));
    assert_eq!(parse_batch("SET XACT_ABORT ON\nSET NOCOUNT OFF;").unwrap().len(), 2);
    assert_eq!(parse_batch("SET QUOTED_IDENTIFIER ON; SET NUMERIC_ROUNDABORT OFF").unwrap().len(), 2);
    assert!(parse_batch("SET QUOTED_IDENTIFIER OFF").is_err());
    assert!(parse_batch("SET ANSI_NULLS OFF").is_err());
    assert!(matches!(one("DECLARE @h uniqueidentifier"), Statement::Declare(d) if d.len() == 1));
    match one("DECLARE @t AS nvarchar(256), @n BIGINT = 5") {
        Statement::Declare(d) => assert_eq!(
            d,
            [
                Declared { var: "@t".into(), ty: "nvarchar(256)".into(), value: None },
                Declared { var: "@n".into(), ty: "bigint".into(), value: Some(Value::Int(5)) },
            ]
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        one("SELECT @a = @b, @c = N'x'"),
        Statement::AssignVars(vec![("@a".into(), Value::Var("@b".into())), ("@c".into(), Value::Str("x".into()))])
    );
    assert!(
        matches!(one("EXEC sbworker.count_attempts @queue = @P1, @keys = N'[]'"), Statement::Exec { args, .. } if args.len() == 2)
    );
}

#[test]
fn a_body_may_be_cast_or_converted_and_a_handle_parenthesised() {
    let cast = |sql: &str| match &parse_batch(sql).unwrap()[0] {
        Statement::Send { handles, body: Some(Value::Cast(inner, ty)), .. } => {
            (handles[0].clone(), (**inner).clone(), ty.clone())
        }
        other => panic!("{other:?}"),
    };
    assert_eq!(
        cast("SEND ON CONVERSATION (@h) MESSAGE TYPE [t] (CAST(@msg AS xml))"),
        (Value::Var("@h".into()), Value::Var("@msg".into()), "xml".into())
    );
    assert_eq!(
        cast("SEND ON CONVERSATION @h MESSAGE TYPE [t] (CONVERT(varbinary(max), N'<a/>'))"),
        (Value::Var("@h".into()), Value::Str("<a/>".into()), "varbinary(max)".into())
    );
    assert_eq!(cast("SEND ON CONVERSATION @h MESSAGE TYPE [t] (CONVERT(xml, @m, 0));").2, "xml");
}

#[test]
fn case_in_a_receive_column_list_as_the_reference_page_writes_it() {
    match one("WAITFOR (RECEIVE message_type_name,
             CASE WHEN validation = 'X' THEN CAST(message_body AS XML) ELSE CAST(N'<none/>' AS XML) END,
             conversation_handle
         FROM ExpenseQueue INTO @receiveTable), TIMEOUT 60000")
    {
        Statement::Receive { columns, into: Some(t), .. } => {
            assert_eq!(t, "@receivetable");
            assert_eq!(
                columns[1],
                Column::Case(Case {
                    whens: vec![(
                        "validation".into(),
                        Value::AnsiStr("X".into()),
                        Operand::Column { source: "message_body".into(), cast: Some("xml".into()) }
                    )],
                    otherwise: Some(Operand::Literal { value: Value::Str("<none/>".into()), cast: Some("xml".into()) }),
                    alias: None,
                })
            );
        }
        other => panic!("{other:?}"),
    }
    match one("RECEIVE CASE WHEN validation = 'X' THEN CAST(message_body AS XML) ELSE NULL END AS message_body FROM q")
    {
        Statement::Receive { columns, .. } => {
            assert!(matches!(&columns[0], Column::Case(c) if c.alias.as_deref() == Some("message_body")))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(parse_batch("RECEIVE CASE validation WHEN 'X' THEN 1 END FROM q").unwrap_err().number, NOT_SUPPORTED);
}

#[test]
fn queue_depth_endpoint_state_and_alter_queue() {
    assert_eq!(
        one("SELECT COUNT(*) AS n FROM dbo.q WITH (READPAST)"),
        Statement::CountQueue { queue: "dbo.q".into(), alias: Some("n".into()) }
    );
    assert_eq!(
        one("SELECT state, state_desc FROM sys.conversation_endpoints WHERE conversation_handle = @P1"),
        Statement::SelectEndpoint {
            columns: Some(vec!["state".into(), "state_desc".into()]),
            handle: Value::Var("@p1".into())
        }
    );
    assert_eq!(
        one("ALTER QUEUE [dbo].[q] WITH STATUS = ON POISON_MESSAGE_HANDLING (STATUS = OFF)"),
        Statement::AlterQueue {
            queue: "dbo.q".into(),
            enabled: Some(true),
            poison_handling: Some(false),
            max_readers: None
        }
    );
    assert_eq!(
        one("alter queue q with poison_message_handling (status = on)"),
        Statement::AlterQueue { queue: "q".into(), enabled: None, poison_handling: Some(true), max_readers: None }
    );
    assert_eq!(
        one("ALTER QUEUE q WITH ACTIVATION (STATUS = OFF, MAX_QUEUE_READERS = 4)"),
        Statement::AlterQueue { queue: "q".into(), enabled: None, poison_handling: None, max_readers: Some(4) }
    );
    for refused in [
        "ALTER QUEUE q WITH RETENTION = ON",
        "ALTER QUEUE q WITH ACTIVATION (STATUS = ON, MAX_QUEUE_READERS = 4)",
        "ALTER QUEUE q WITH ACTIVATION (PROCEDURE_NAME = dbo.p)",
        "ALTER QUEUE q REBUILD",
        "ALTER TABLE t ADD c int",
        "SELECT COUNT(*) FROM q WITH (NOLOCK)",
        "SELECT state FROM sys.conversation_endpoints WHERE far_service = 'x'",
    ] {
        assert_eq!(parse_batch(refused).unwrap_err().number, NOT_SUPPORTED, "{refused}");
    }
}

#[test]
fn send_on_several_conversations_at_once() {
    match one("SEND ON CONVERSATION (@a, @b) MESSAGE TYPE [t] (@m)") {
        Statement::Send { handles, .. } => {
            assert_eq!(handles, [Value::Var("@a".into()), Value::Var("@b".into())])
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn table_variables_if_and_blocks_as_the_reference_pages_write_them() {
    let b = parse_batch(
        "DECLARE @procTable TABLE(service_instance_id UNIQUEIDENTIFIER, handle UNIQUEIDENTIFIER NOT NULL,
             message_body VARBINARY(MAX) NULL);
         RECEIVE TOP (1) conversation_group_id, conversation_handle, message_body FROM ExpenseQueue INTO @procTable;
         SELECT * FROM @procTable; SELECT handle, message_body FROM @procTable",
    )
    .unwrap();
    assert_eq!(
        b[0],
        Statement::DeclareTable {
            var: "@proctable".into(),
            columns: vec![
                ("service_instance_id".into(), "uniqueidentifier".into()),
                ("handle".into(), "uniqueidentifier".into()),
                ("message_body".into(), "varbinary(max)".into()),
            ],
        }
    );
    assert!(matches!(&b[1], Statement::Receive { into: Some(t), .. } if t == "@proctable"));
    assert_eq!(b[2], Statement::SelectTable { columns: None, table: "@proctable".into() });
    assert_eq!(
        b[3],
        Statement::SelectTable {
            columns: Some(vec!["handle".into(), "message_body".into()]),
            table: "@proctable".into()
        }
    );
    // The tutorial's IF with a block holding END CONVERSATION; ELSE with one statement.
    let b = parse_batch(
        "IF @name = N'//AWDB/1DBSample/RequestMessage'
         BEGIN
             DECLARE @reply NVARCHAR(100);
             SEND ON CONVERSATION @h MESSAGE TYPE [r] (@reply);
             END CONVERSATION @h;
         END
         ELSE END CONVERSATION @h WITH CLEANUP;
         IF @h IS NOT NULL SELECT @h AS handle",
    )
    .unwrap();
    match &b[0] {
        Statement::If { condition: Condition::Equal(Value::Var(v), Value::Str(_)), then, otherwise: Some(e) } => {
            assert_eq!(v, "@name");
            assert!(matches!(&**then, Statement::Block(body) if body.len() == 3), "{then:?}");
            assert!(matches!(&**e, Statement::EndConversation { cleanup: true, .. }));
        }
        other => panic!("{other:?}"),
    }
    match &b[1] {
        Statement::If { condition: Condition::IsNotNull(_), then, otherwise: None } => {
            assert_eq!(**then, Statement::SelectVars(vec![(Value::Var("@h".into()), Some("handle".into()))]));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn anything_else_is_refused_clearly() {
    let e = parse_batch("SELECT * FROM sys.tables").unwrap_err();
    assert_eq!(e.number, NOT_SUPPORTED);
    assert!(e.message.contains("SELECT from a table other than a table variable is not supported"), "{e}");
    assert_eq!(parse_batch("SELECT * FROM @t WHERE a = 1").unwrap_err().number, NOT_SUPPORTED);
    assert_eq!(parse_batch("SELECT name FROM sys.services").unwrap_err().number, NOT_SUPPORTED);
    assert_eq!(parse_batch("SEND ON @h").unwrap_err().number, 102);
    assert_eq!(parse_batch("RECEIVE @x = message_body FROM q INTO @t").unwrap_err().number, 102);
    assert_eq!(parse_batch("IF @a < 1 SELECT @a").unwrap_err().number, NOT_SUPPORTED);
    // (`>` is one: the hand-off's rollback, `IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION`.)
    assert!(matches!(
        parse_batch("IF @@TRANCOUNT > 0 ROLLBACK TRANSACTION").unwrap().as_slice(),
        [Statement::If { condition: Condition::Greater(_, Value::Int(0)), otherwise: None, .. }]
    ));
    assert_eq!(parse_batch("IF @a = 1 BEGIN SELECT @a").unwrap_err().number, 102);
    assert_eq!(parse_batch("SET ANSI_NULLS OFF").unwrap_err().number, NOT_SUPPORTED);
    assert_eq!(parse_batch("SET DATEFORMAT dmy").unwrap_err().number, NOT_SUPPORTED);
    assert_eq!(parse_batch("SET NOCOUNT maybe").unwrap_err().number, 102);
    assert_eq!(parse_batch("END CONVERSATION @h WITH ERROR = 1").unwrap_err().number, 102);
    assert_eq!(parse_batch("SELECT 'open").unwrap_err().number, 105);
}

#[test]
fn every_statement_the_worker_sends_is_recognised() {
    for (name, sql) in crate::broker::mssql::statements_as_sent() {
        let parsed = parse_batch(&sql).unwrap_or_else(|e| panic!("{name}: {e}\n{sql}"));
        assert!(!parsed.is_empty(), "{name}");
    }
}

#[test]
fn the_session_settings_drivers_send_at_login_are_taken() {
    // pymssql (FreeTDS), its default connection properties.
    let pymssql = "SET ARITHABORT ON;SET CONCAT_NULL_YIELDS_NULL ON;SET ANSI_NULLS ON;SET ANSI_NULL_DFLT_ON ON;\
                   SET ANSI_PADDING ON;SET ANSI_WARNINGS ON;SET ANSI_NULL_DFLT_ON ON;SET CURSOR_CLOSE_ON_COMMIT ON;\
                   SET QUOTED_IDENTIFIER ON;SET TEXTSIZE 2147483647;";
    assert_eq!(parse_batch(pymssql).unwrap().len(), 10);
    // tedious, its initial SQL.
    let tedious = "set textsize 2147483647\nset quoted_identifier on\nset arithabort off\nset numeric_roundabort off\n\
                   set ansi_warnings on\nset ansi_padding on\nset ansi_nulls on\nset concat_null_yields_null on\n\
                   set cursor_close_on_commit off\nset implicit_transactions off\nset language us_english\n\
                   set dateformat mdy\nset datefirst 7\nset transaction isolation level read committed";
    let v = parse_batch(tedious).unwrap();
    assert_eq!(v.len(), 14);
    assert_eq!(
        v[13],
        Statement::SetSession { option: "TRANSACTION ISOLATION LEVEL".into(), value: "READ COMMITTED".into() }
    );
    assert_eq!(
        one("SET LANGUAGE N'us_english'"),
        Statement::SetSession { option: "LANGUAGE".into(), value: "US_ENGLISH".into() }
    );
    assert_eq!(one("SET LOCK_TIMEOUT -1"), Statement::SetSession { option: "LOCK_TIMEOUT".into(), value: "-1".into() });
    assert_eq!(
        one("SET LOCK_TIMEOUT 1000"),
        Statement::SetSession { option: "LOCK_TIMEOUT".into(), value: "1000".into() }
    );
    // Another value changes what the emulator does: refused, saying which.
    for (sql, says) in [
        ("SET IMPLICIT_TRANSACTIONS ON", "SET IMPLICIT_TRANSACTIONS ON"),
        ("SET LANGUAGE Nederlands", "SET LANGUAGE NEDERLANDS"),
        ("SET DATEFORMAT dmy", "SET DATEFORMAT DMY"),
        ("SET TEXTSIZE 4096", "SET TEXTSIZE 4096"),
        ("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", "SET TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
        ("SET LOCK_TIMEOUT -2", "SET LOCK_TIMEOUT -2"),
    ] {
        let e = parse_batch(sql).unwrap_err();
        assert_eq!(e.number, NOT_SUPPORTED, "{sql}");
        assert!(e.message.contains(says), "{sql}: {}", e.message);
    }
}

#[test]
fn binary_literals_are_values() {
    assert_eq!(
        one("DECLARE @b VARBINARY(MAX) = 0x3C0061003E00"),
        Statement::Declare(vec![Declared {
            var: "@b".into(),
            ty: "varbinary(max)".into(),
            value: Some(Value::Bin(vec![0x3C, 0, 0x61, 0, 0x3E, 0]))
        }])
    );
    // An odd number of digits has a leading zero; 0x alone is empty.
    assert_eq!(one("SET @b = 0xABC"), Statement::SetVar { var: "@b".into(), value: Value::Bin(vec![0x0A, 0xBC]) });
    assert_eq!(one("SET @b = 0x"), Statement::SetVar { var: "@b".into(), value: Value::Bin(vec![]) });
    assert_eq!(parse_batch("SET @b = 0x12G4").unwrap_err().number, 102);
}

#[test]
fn valid_t_sql_the_emulator_does_not_run_is_said_to_be_so_not_a_syntax_error() {
    for sql in [
        "EXEC sp_executesql N'SELECT @a AS a', N'@a INT', 1",
        "EXEC sp_executesql N'SELECT @a AS a', N'@a INT OUTPUT', @a = @b OUTPUT",
        "SELECT * FROM sys.conversation_endpoints;",
        "SELECT @@VERSION FROM sys.conversation_endpoints",
    ] {
        assert_eq!(parse_batch(sql).unwrap_err().number, NOT_SUPPORTED, "{sql}");
    }
}

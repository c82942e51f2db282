//! Running one statement of a batch on the connection's PostgreSQL broker session.

use super::*;

/// Runs one statement; `Some(rows)` when it produced a result set or counted rows.
pub(super) async fn execute(
    conn: &mut Conn,
    st: Statement,
    vars: &mut Params,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    let params = &*vars;
    let s = &mut conn.session;
    match st {
        Statement::Transaction(what) => {
            transaction(conn, what, t).await?;
            Ok(None)
        }
        Statement::SetOption { option, on } => {
            if option == "NOCOUNT" {
                conn.nocount = on;
            }
            if option == "XACT_ABORT" {
                conn.xact_abort = on;
            }
            Ok(None)
        }
        Statement::SetSession { option, value } => {
            if option == "LOCK_TIMEOUT" {
                conn.lock_timeout_ms = value.parse().unwrap_or(-1);
            }
            Ok(None)
        }
        Statement::Declare(declared) => {
            for d in declared {
                let v = match d.value {
                    Some(v) => typed(Some(&d.ty), value(&v, vars)?)?,
                    None => Sql::Null,
                };
                conn.var_types.insert(d.var.clone(), d.ty);
                vars.insert(d.var, v);
            }
            Ok(None)
        }
        Statement::DeclareTable { var, columns } => {
            for (_, ty) in &columns {
                column_type(ty)?;
            }
            conn.tables.insert(var, TableVar { columns, rows: Vec::new() });
            Ok(None)
        }
        Statement::SelectTable { columns, table } => {
            let tv = conn.tables.get(&table).ok_or_else(|| undeclared_table(&table))?;
            select_table(columns.as_deref(), tv, t)
        }
        Statement::CountQueue { queue, alias } => {
            let q = queue_name(&queue);
            conn.faults.look(q);
            let row = s.client().query_one(emu::QUEUE_DEPTH.sql, &[&q]).await.map_err(pg_failure)?;
            if !row.get::<_, bool>(1) {
                return Err(invalid_object(&queue));
            }
            let n = i32::try_from(row.get::<_, i64>(0)).unwrap_or(i32::MAX);
            Ok(result_set(t, &[(alias.as_deref().unwrap_or(""), ColType::Int)], &[vec![Sql::Int(n)]]))
        }
        Statement::SelectEndpoint { columns, handle } => {
            let h = as_uuid(value(&handle, params)?)?;
            let rows = s.client().query(emu::ENDPOINT.sql, &[&h]).await.map_err(pg_failure)?;
            endpoint_rows(columns.as_deref(), &rows, t)
        }
        Statement::AlterQueue { queue, enabled, poison_handling, max_readers } => {
            let q = queue_name(&queue);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&q, &enabled, &poison_handling, &max_readers];
            s.client().execute(emu::ALTER_QUEUE.sql, &params).await.map_err(|e| {
                let f = pg_failure(e);
                if f.number == 50000 && f.message.contains("is not found") { invalid_object(&queue) } else { f }
            })?;
            Ok(None)
        }
        Statement::SetVar { var, value: v } => {
            declared(vars, &var)?;
            let v = typed(conn.var_types.get(&var), value(&v, params)?)?;
            vars.insert(var, v);
            Ok(None)
        }
        Statement::AssignVars(assignments) => {
            for (var, v) in assignments {
                declared(vars, &var)?;
                let v = typed(conn.var_types.get(&var), value(&v, vars)?)?;
                vars.insert(var, v);
            }
            Ok(None)
        }
        Statement::If { .. } | Statement::Block(_) | Statement::ExecSql { .. } => {
            unreachable!("run takes control-of-flow statements and sp_executesql apart")
        }
        Statement::SelectVars(names) => {
            let mut cols = Vec::new();
            let mut row = Vec::new();
            for (n, alias) in &names {
                let v = value(n, params)?;
                // A variable has its declared type, as in SQL Server (an xml variable is
                // xml, an int one int); a literal the type of its value.
                let declared = match n {
                    Value::Var(var) => conn.var_types.get(var).filter(|t| column_type(t).is_ok()),
                    _ => None,
                };
                let (ty, v) = match declared.map(|d| (column_type(d), column_value(d, v.clone()))) {
                    Some((Ok(ty), Ok(v))) => (ty, v),
                    // A value the declared type does not hold: as it is (as before).
                    _ => (type_of(&v), v),
                };
                cols.push((alias.as_deref().unwrap_or(""), ty));
                row.push(v);
            }
            Ok(result_set(t, &cols, &[row]))
        }
        Statement::Receive { waitfor, top, columns, queue, filter, timeout, into } => {
            if let Some(table) = &into
                && !conn.tables.contains_key(table)
            {
                return Err(undeclared_table(table));
            }
            let max = match top {
                Some(v) => i32::try_from(as_i64(value(&v, params)?)?).unwrap_or(i32::MAX),
                None => i32::MAX,
            };
            let wait = wait_of(waitfor, timeout, params)?;
            let q = queue_name(&queue);
            let s = &mut conn.session;
            let receiving = conn.faults.receives(q, filter.is_none());
            if activation::is_notification_queue(&queue) {
                // SQL Server's event notifications (the emulated event-based activation).
                if filter.is_some() {
                    return Err(Failure {
                        number: tsql::NOT_SUPPORTED,
                        class: 16,
                        message: "RECEIVE … WHERE from sbworker.activation is not supported by the emulator.".into(),
                    });
                }
                let msgs = conn.activation.receive(s, &queue, max, wait).await?;
                drop(receiving);
                return received(conn, &columns, &msgs, into, vars, t);
            }
            let msgs = match filter {
                None => s.receive(q, max, None, wait).await?,
                Some(Filter::Group(v)) => {
                    let group = as_uuid(value(&v, params)?)?;
                    receive_group(s, q, max, group, wait, conn.lock_timeout_ms, &conn.faults).await?
                }
                Some(Filter::Handle(v)) => s.receive_conversation_taking(q, as_uuid(value(&v, params)?)?, max).await?,
            };
            drop(receiving);
            if !msgs.is_empty()
                && let Some(f) = conn.faults.on_receive()
            {
                return match f {
                    Injected::Deadlock => {
                        warn!("fault injected: deadlock 1205 on a RECEIVE of {} messages", msgs.len());
                        Err(deadlock())
                    }
                    Injected::LockTimeout => {
                        warn!("fault injected: lock timeout 1222 on a RECEIVE of {} messages", msgs.len());
                        Err(lock_timeout())
                    }
                    Injected::Drop => {
                        conn.drop_now = true;
                        Ok(None)
                    }
                };
            }
            conn.received |= !msgs.is_empty();
            received(conn, &columns, &msgs, into, vars, t)
        }
        Statement::GetConversationGroup { waitfor, var, queue, timeout } => {
            declared(vars, &var)?;
            let wait = wait_of(waitfor, timeout, params)?;
            let _receiving = conn.faults.receives(queue_name(&queue), true);
            let g = s.get_conversation_group(queue_name(&queue), wait).await?;
            vars.insert(var, g.map_or(Sql::Null, Sql::Guid));
            Ok(None)
        }
        Statement::BeginDialog { handle_var, from_service, to_service, contract, related_group, lifetime, .. } => {
            declared(vars, &handle_var)?;
            let to = as_text(value(&to_service, params)?)?;
            let related = match related_group {
                Some(v) => Some(as_uuid(value(&v, params)?)?),
                None => None,
            };
            let lifetime = match lifetime {
                Some(v) => Some(i32::try_from(as_i64(value(&v, params)?)?).map_err(|_| fail("LIFETIME out of range"))?),
                None => None,
            };
            let h = s.begin_dialog(&from_service, &to, &contract, related, lifetime).await?;
            vars.insert(handle_var, Sql::Guid(h));
            Ok(None)
        }
        Statement::Send { handles, message_type, body } => {
            let ty = message_type.unwrap_or_else(|| "DEFAULT".into());
            let body = match body {
                Some(v) => as_bytes(value(&v, params)?)?,
                None => None,
            };
            // On several conversations, the same message on each (SQL Server stores one
            // copy for all; the broker here one per conversation).
            let mut uuids: Vec<Uuid> = Vec::with_capacity(handles.len());
            for handle in &handles {
                let h = as_uuid(value(handle, params)?)?;
                if uuids.contains(&h) {
                    // SEND's reference page: the same handle can be used only once.
                    return Err(fail(format!(
                        "The conversation handle {h} is given more than once in SEND ON CONVERSATION: \
                         the same conversation handle can be used only once."
                    )));
                }
                uuids.push(h);
            }
            for h in uuids {
                s.send(h, &ty, body.as_deref()).await?;
            }
            if conn.received && conn.faults.on_send() {
                warn!("fault injected: the connection drops between a SEND and its COMMIT");
                conn.drop_now = true;
            }
            Ok(None)
        }
        Statement::EndConversation { handle, error, cleanup } => {
            let h = as_uuid(value(&handle, params)?)?;
            if cleanup {
                s.end_conversation_cleanup(h).await?;
                return Ok(None);
            }
            match error {
                None => s.end_conversation(h, None).await?,
                Some((code, text)) => {
                    let code =
                        i32::try_from(as_i64(value(&code, params)?)?).map_err(|_| fail("error code out of range"))?;
                    let text = as_text(value(&text, params)?)?;
                    s.end_conversation(h, Some((code, &text))).await?
                }
            }
            Ok(None)
        }
        Statement::BeginConversationTimer { handle, timeout } => {
            let h = as_uuid(value(&handle, params)?)?;
            let seconds = i32::try_from(as_i64(value(&timeout, params)?)?).map_err(|_| fail("TIMEOUT out of range"))?;
            s.begin_conversation_timer(h, seconds).await?;
            Ok(None)
        }
        Statement::MoveConversation { handle, group } => {
            s.move_conversation(as_uuid(value(&handle, params)?)?, as_uuid(value(&group, params)?)?).await?;
            Ok(None)
        }
        Statement::Exec { procedure, args } => {
            let mut a: HashMap<String, Sql> = HashMap::new();
            for (name, v) in args {
                a.insert(name, value(&v, params)?);
            }
            if procedure.eq_ignore_ascii_case("sbworker.queue_state")
                && let Some(q) = a.get("@queue").cloned().and_then(|v| as_text(v).ok())
            {
                conn.faults.look(queue_name(&q));
            }
            super::procedures::call(s, &procedure, a, t).await
        }
    }
}

/// What a RECEIVE received, as the statement asks: into a table variable, into
/// variables (converted to their declared types), or as a result set.
fn received(
    conn: &mut Conn,
    columns: &[Column],
    msgs: &[sbworker_core::transport::Message],
    into: Option<String>,
    vars: &mut Params,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    if let Some(table) = into {
        let tv = conn.tables.get_mut(&table).expect("checked above");
        return receive_into(columns, msgs, vars, tv).map(Some);
    }
    let r = receive_result(columns, msgs, vars, t)?;
    // Variables take their declared types.
    for c in columns {
        if let Column::Item { var: Some(v), .. } = c
            && let Some(got) = vars.remove(v)
        {
            vars.insert(v.clone(), typed(conn.var_types.get(v), got)?);
        }
    }
    Ok(r)
}

/// `RECEIVE … WHERE conversation_group_id = g` as SQL Server most likely runs it (the
/// RECEIVE page does not say): a group another session holds is waited for, as a lock,
/// until that session's transaction ends or the connection's `LOCK_TIMEOUT` passes
/// (error 1222); the WAITFOR's TIMEOUT bounds only the wait for messages. The
/// PostgreSQL broker behind skips a held group, so the wait is the emulator's: it looks
/// again every 10 ms while the group still has messages waiting.
async fn receive_group(
    s: &mut Session,
    queue: &str,
    max: i32,
    group: Uuid,
    wait: Duration,
    lock_timeout_ms: i64,
    faults: &Faults,
) -> Result<Vec<sbworker_core::transport::Message>, Failure> {
    let started = tokio::time::Instant::now();
    let mut counted = false;
    loop {
        let msgs = s.receive(queue, max, Some(group), Duration::ZERO).await?;
        if !msgs.is_empty() {
            return Ok(msgs);
        }
        let held = s.client().query_one(emu::GROUP_WAITING.sql, &[&group, &queue]).await.map_err(pg_failure)?;
        if !held.get::<_, bool>(0) {
            // Not held (or nothing waiting): the ordinary wait for messages.
            return Ok(if wait.is_zero() { msgs } else { s.receive(queue, max, Some(group), wait).await? });
        }
        if !counted {
            faults.note_group_lock_wait();
            counted = true;
        }
        if lock_timeout_ms >= 0 && started.elapsed() >= Duration::from_millis(lock_timeout_ms.unsigned_abs()) {
            return Err(lock_timeout());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

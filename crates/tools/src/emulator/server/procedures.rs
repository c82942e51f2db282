//! The stored procedures the emulator serves: the worker's bookkeeping and the
//! collector's procedures, run as the PostgreSQL broker's equivalents, and the bench's
//! effect (a PostgreSQL function).

use super::*;

/// Runs `EXEC procedure` with its named arguments `a`.
pub(super) async fn call(
    s: &mut Session,
    procedure: &str,
    mut a: HashMap<String, Sql>,
    t: &mut Tokens,
) -> Result<Option<u64>, Failure> {
    let mut arg = |n: &str| a.remove(n).ok_or_else(|| fail(format!("{procedure}: argument {n} is missing")));
    match procedure.to_lowercase().as_str() {
        "sbworker.count_attempts" => {
            let queue = as_text(arg("@queue")?)?;
            let keys = keys_of(&as_text(arg("@keys")?)?)?;
            let attempts = s.count_attempts(queue_name(&queue), &keys).await?;
            let rows: Vec<Vec<Sql>> = attempts
                .into_iter()
                .map(|x| {
                    vec![
                        Sql::Guid(x.key.conversation_handle),
                        Sql::BigInt(x.key.sequence),
                        Sql::Int(x.attempts),
                        x.last_error.map_or(Sql::Null, Sql::NVarChar),
                        Sql::Int(x.failures),
                        Sql::Int(x.transient_failures),
                    ]
                })
                .collect();
            let cols = [
                ("conversation_handle", ColType::Guid),
                ("message_sequence_number", ColType::BigInt),
                ("attempts", ColType::Int),
                ("last_error", ColType::NVarChar),
                ("failures", ColType::Int),
                ("transient_failures", ColType::Int),
            ];
            Ok(result_set(t, &cols, &rows))
        }
        "sbworker.note_failure" => {
            let keys = keys_of(&as_text(arg("@keys")?)?)?;
            let error = as_text(arg("@error")?)?;
            // @transient bit = 0 (optional, as the procedure declares it).
            let fault = match arg("@transient").ok() {
                Some(Sql::Bit(true)) => Fault::Transient,
                Some(Sql::Int(i)) if i != 0 => Fault::Transient,
                Some(Sql::BigInt(i)) if i != 0 => Fault::Transient,
                _ => Fault::Message,
            };
            s.note_failure(&keys, &error, fault).await?;
            Ok(None)
        }
        "sbworker.forget_attempts" => {
            s.forget_attempts(&keys_of(&as_text(arg("@keys")?)?)?).await?;
            Ok(None)
        }
        "sbworker.set_aside" => {
            let queue = as_text(arg("@queue")?)?;
            let message = Message {
                id: 0,
                service: as_text(arg("@service")?)?,
                contract: as_text(arg("@contract")?)?,
                conversation_group_id: as_uuid(arg("@group")?)?,
                conversation_handle: as_uuid(arg("@handle")?)?,
                sequence: as_i64(arg("@seq")?)?,
                message_type: as_text(arg("@type")?)?,
                body: as_bytes(arg("@body")?)?.unwrap_or_default(),
            };
            let attempts = i32::try_from(as_i64(arg("@attempts")?)?).unwrap_or(i32::MAX);
            let reason = as_text(arg("@reason")?)?;
            s.dead_letter(DeadLetter { queue: queue_name(&queue), message: &message, attempts, reason: &reason })
                .await?;
            Ok(None)
        }
        "sbworker.heartbeat" => {
            let beat = crate::transport::Heartbeat {
                instance: as_uuid(arg("@instance")?)?,
                host: as_text(arg("@host")?)?,
                pid: i32::try_from(as_i64(arg("@pid")?)?).map_err(|_| fail("@pid out of range"))?,
                version: "",
                started_unix: as_i64(arg("@started_unix")?)?,
                queues: Vec::new(),
                interval_ms: match arg("@interval_ms").ok() {
                    None | Some(Sql::Null) => 10_000,
                    Some(v) => int32(v, "@interval_ms")?,
                },
                contract_versie: match arg("@contract_versie").ok() {
                    None | Some(Sql::Null) => None,
                    Some(v) => Some(int32(v, "@contract_versie")?),
                },
            };
            let version = as_text(arg("@version")?)?;
            let queues = as_text(arg("@queues")?)?;
            s.heartbeat_as(&beat, &version, &queues).await?;
            Ok(None)
        }
        "sbworker.heartbeat_end" => {
            s.heartbeat_end(as_uuid(arg("@instance")?)?).await?;
            Ok(None)
        }
        "sbworker.claim_version" => {
            let dv = i32::try_from(as_i64(arg("@dv")?)?).map_err(|_| fail("@dv out of range"))?;
            let p = i32::try_from(as_i64(arg("@periode")?)?).map_err(|_| fail("@periode out of range"))?;
            let claimed = s.claim_version(dv, p, as_i64(arg("@versie")?)?).await?;
            Ok(result_set(t, &[("claimed", ColType::Bit)], &[vec![Sql::Bit(claimed)]]))
        }
        "sbworker.queue_state" => {
            let queue = as_text(arg("@queue")?)?;
            let rows = match s.queue_state(queue_name(&queue)).await {
                Ok(q) => vec![vec![
                    Sql::Bit(q.enabled),
                    Sql::BigInt(q.messages),
                    Sql::Bit(q.poison_handling),
                    Sql::Bit(false),
                    // (smallint in sys.service_queues; the emulator's values carry no smallint.)
                    Sql::Int(i32::try_from(q.max_readers.unwrap_or(0)).unwrap_or(i32::MAX)),
                ]],
                Err(e) if e.kind == ErrorKind::NotFound => Vec::new(),
                Err(e) => return Err(e.into()),
            };
            let cols = [
                ("is_receive_enabled", ColType::Bit),
                ("messages", ColType::BigInt),
                ("is_poison_message_handling_enabled", ColType::Bit),
                ("is_activation_enabled", ColType::Bit),
                ("max_readers", ColType::Int),
            ];
            Ok(result_set(t, &cols, &rows))
        }
        // Reader slots (02_worker.sql), as the PostgreSQL session takes them: advisory
        // locks on this connection's session, as SQL Server's session-owned applocks.
        "sbworker.reader_slot" => {
            let queue = as_text(arg("@queue")?)?;
            let slots = u32::try_from(as_i64(arg("@slots")?)?.max(0)).unwrap_or(u32::MAX);
            let slot = s.take_reader_slot(queue_name(&queue), slots).await?;
            let v = slot.map_or(Sql::Null, |n| Sql::Int(i32::try_from(n).unwrap_or(i32::MAX)));
            Ok(result_set(t, &[("slot", ColType::Int)], &[vec![v]]))
        }
        "sbworker.reader_slot_free" => {
            let queue = as_text(arg("@queue")?)?;
            let slot = u32::try_from(as_i64(arg("@slot")?)?.max(0)).unwrap_or(u32::MAX);
            s.free_reader_slot(queue_name(&queue), slot).await?;
            Ok(None)
        }
        "rekenserver.sla_antwoord_op" => {
            let handle = as_uuid(arg("@handle")?)?;
            let xml = as_text(arg("@antwoord")?)?;
            let a = contract::decode_antwoord(xml.as_bytes(), &Limits::default()).map_err(|e| Failure {
                number: 9400,
                class: 16,
                message: format!("XML parsing: {e}"),
            })?;
            let superseded = a.waarschuwingen.iter().any(|w| w.code == crate::contract::VERVANGEN);
            let outcome = match s.store_antwoord(handle, &a, superseded).await? {
                Stored::Stored => "opgeslagen",
                Stored::Older => "verouderd",
                Stored::Superseded => "vervangen",
            };
            Ok(result_set(t, &[("uitkomst", ColType::NVarChar)], &[vec![Sql::NVarChar(outcome.into())]]))
        }
        // The benchmark's business effect (`sbworker bench`): a PostgreSQL function.
        "bench.apply" => {
            let conversation = as_uuid(arg("@conversation")?)?;
            let seq = as_i64(arg("@seq")?)?;
            let body = as_bytes(arg("@body")?)?;
            s.client()
                .execute(crate::statements::postgres_emulator::BENCH_APPLY.sql, &[&conversation, &seq, &body])
                .await
                .map_err(|e| Failure::from(crate::broker::postgres::error_of(e)))?;
            Ok(None)
        }
        // Which side the database holds (02_worker.sql): the PostgreSQL install's.
        "sbworker.side" => {
            let side = crate::broker::postgres::side_of(s.client()).await.map_err(pg)?;
            Ok(result_set(t, &[("side", ColType::NVarChar)], &[vec![Sql::NVarChar(side.name().to_owned())]]))
        }
        // `sbworker status` and `sbworker dead-letter` (06_operations.sql): the PostgreSQL
        // broker's functions (007_operations.sql), the same shapes.
        "sbworker.status_report" => {
            let recent = int32(arg("@recent_minutes")?, "@recent_minutes")?;
            let stale = int32(arg("@stale_minutes")?, "@stale_minutes")?;
            let row = s.client().query_one(ops::STATUS_REPORT.sql, &[&recent, &stale]).await.map_err(pg)?;
            Ok(result_set(t, &[("report", ColType::NVarChar)], &[vec![Sql::NVarChar(row.get(0))]]))
        }
        "sbworker.dead_letters" => {
            let since = optional_text(arg("@since")?)?;
            let limit = int32(arg("@limit")?, "@limit")?;
            let rows = s.client().query(ops::DEAD_LETTERS.sql, &[&since, &limit]).await.map_err(pg)?;
            Ok(letters(t, &rows))
        }
        "sbworker.dead_letter_show" => {
            let id = as_i64(arg("@id")?)?;
            let rows = s.client().query(ops::DEAD_LETTER.sql, &[&id]).await.map_err(pg)?;
            Ok(letters(t, &rows))
        }
        "sbworker.replay_dead_letter" => {
            let id = as_i64(arg("@id")?)?;
            let by = as_text(arg("@by")?)?;
            let unless_replayed = optional_bit(arg("@unless_replayed").ok())?;
            let row = s.client().query_one(ops::REPLAY.sql, &[&id, &by, &unless_replayed]).await.map_err(pg)?;
            let handle = row.get::<_, Option<Uuid>>(0).map_or(Sql::Null, Sql::Guid);
            Ok(result_set(t, &[("conversation_handle", ColType::Guid)], &[vec![handle]]))
        }
        "sbworker.purge_dead_letters" => {
            let before = as_text(arg("@before")?)?;
            let batch = int32(arg("@batch")?, "@batch")?;
            let row = s.client().query_one(ops::PURGE.sql, &[&before, &batch]).await.map_err(pg)?;
            Ok(result_set(t, &[("deleted", ColType::Int)], &[vec![Sql::Int(row.get(0))]]))
        }
        // The web page's dead letters and actions (06_operations.sql), as the same
        // PostgreSQL functions.
        "sbworker.dead_letter_page" => {
            let (queue, reason, replayed, upto, id) = letter_filter(&mut arg)?;
            let limit = int32(arg("@limit")?, "@limit")?;
            let rows = s
                .client()
                .query(ops::DEAD_LETTER_PAGE.sql, &[&queue, &reason, &replayed, &upto, &limit, &id])
                .await
                .map_err(pg)?;
            Ok(letters(t, &rows))
        }
        "sbworker.dead_letter_count" => {
            let (queue, reason, replayed, upto, id) = letter_filter(&mut arg)?;
            let row = s
                .client()
                .query_one(ops::DEAD_LETTER_COUNT.sql, &[&queue, &reason, &replayed, &upto, &id])
                .await
                .map_err(pg)?;
            let last = row.get::<_, Option<i64>>(1).map_or(Sql::Null, Sql::BigInt);
            Ok(result_set(
                t,
                &[("letters", ColType::BigInt), ("last_id", ColType::BigInt), ("id_sum", ColType::BigInt)],
                &[vec![Sql::BigInt(row.get(0)), last, Sql::BigInt(row.get(2))]],
            ))
        }
        "sbworker.purge_dead_letters_matching" => {
            let (queue, reason, replayed, upto, id) = letter_filter(&mut arg)?;
            let expected = as_i64(arg("@expected")?)?;
            let detail = as_text(arg("@detail")?)?;
            let sum = match arg("@expected_sum") {
                Ok(Sql::Null) | Err(_) => None,
                Ok(v) => Some(as_i64(v)?),
            };
            let row = s
                .client()
                .query_one(ops::PURGE_MATCHING.sql, &[&queue, &reason, &replayed, &upto, &expected, &detail, &id, &sum])
                .await
                .map_err(pg)?;
            Ok(result_set(t, &[("deleted", ColType::BigInt)], &[vec![Sql::BigInt(row.get(0))]]))
        }
        "sbworker.note_action" => {
            let action = as_text(arg("@action")?)?;
            let detail = as_text(arg("@detail")?)?;
            let letters = as_i64(arg("@letters")?)?;
            s.client().execute(ops::NOTE_ACTION.sql, &[&action, &detail, &letters]).await.map_err(pg)?;
            Ok(None)
        }
        "sbworker.rates" => {
            let minutes = int32(arg("@minutes")?, "@minutes")?;
            let rows = s.client().query(ops::RATES.sql, &[&minutes]).await.map_err(pg)?;
            let ms = |v: Option<i64>| v.map_or(Sql::Null, Sql::BigInt);
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    vec![Sql::Int(r.get(0)), Sql::BigInt(r.get(1)), Sql::BigInt(r.get(2)), ms(r.get(3)), ms(r.get(4))]
                })
                .collect();
            let cols = [
                ("minutes_ago", ColType::Int),
                ("answered", ColType::BigInt),
                ("failed", ColType::BigInt),
                ("p50_ms", ColType::BigInt),
                ("p95_ms", ColType::BigInt),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "sbworker.actions" => {
            let limit = int32(arg("@limit")?, "@limit")?;
            let rows = s.client().query(ops::ACTIONS.sql, &[&limit]).await.map_err(pg)?;
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    vec![
                        Sql::BigInt(r.get(0)),
                        Sql::NVarChar(r.get(1)),
                        Sql::NVarChar(r.get(2)),
                        Sql::NVarChar(r.get(3)),
                        Sql::NVarChar(r.get(4)),
                        Sql::BigInt(r.get(5)),
                    ]
                })
                .collect();
            let cols = [
                ("id", ColType::BigInt),
                ("at", ColType::NVarChar),
                ("who", ColType::NVarChar),
                ("action", ColType::NVarChar),
                ("detail", ColType::NVarChar),
                ("letters", ColType::BigInt),
            ];
            Ok(result_set(t, &cols, &out))
        }
        // `sbworker export --mssql` and `sbworker sweep --mssql` (05_handoff.sql): the
        // PostgreSQL hand-off's statements and sweep, the same shapes.
        "rekenserver.export_claim" => {
            let periode = int32(arg("@periode")?, "@periode")?;
            let mode = as_text(arg("@mode")?)?;
            let minutes = match arg("@lease_minutes").ok() {
                None | Some(Sql::Null) => 15,
                Some(v) => int32(v, "@lease_minutes")?,
            };
            let batch = as_uuid(arg("@batch")?)?;
            let rows = match mode.as_str() {
                "once" => s.client().query(handoff::CLAIM_ONCE.sql, &[&periode, &batch]).await,
                "lease" => {
                    let seconds = f64::from(minutes) * 60.0;
                    s.client().query(handoff::CLAIM_LEASE.sql, &[&periode, &batch, &seconds]).await
                }
                _ => return Err(Failure { number: 50101, class: 16, message: "mode must be once or lease".into() }),
            }
            .map_err(pg)?;
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    let (dv, p, v): (i32, i32, i64) = (r.get(0), r.get(1), r.get(2));
                    vec![
                        Sql::Guid(batch),
                        Sql::NVarChar(format!("{dv}-{p}-{v}")),
                        Sql::Int(dv),
                        Sql::Int(p),
                        Sql::BigInt(v),
                        Sql::Int(r.get(3)),
                        Sql::NVarChar(r.get(4)),
                        Sql::NVarChar(r.get(5)),
                        r.get::<_, Option<i64>>(6).map_or(Sql::Null, Sql::BigInt),
                        r.get::<_, Option<String>>(7).map_or(Sql::Null, Sql::NVarChar),
                    ]
                })
                .collect();
            let cols = [
                ("batch", ColType::Guid),
                ("sleutel", ColType::NVarChar),
                ("dienstverband_id", ColType::Int),
                ("periode_id", ColType::Int),
                ("versie", ColType::BigInt),
                ("kaart_soort", ColType::Int),
                ("loonfactor_code", ColType::NVarChar),
                ("waarde", ColType::NVarChar),
                ("vervangt_versie", ColType::BigInt),
                ("waarschuwingen", ColType::NVarChar),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "rekenserver.export_ack" => {
            let batch = as_uuid(arg("@batch")?)?;
            let n: i64 = s.client().query_one(handoff::ACK.sql, &[&batch]).await.map_err(pg)?.get(0);
            Ok(result_set(t, &[("confirmed", ColType::Int)], &[vec![Sql::Int(n as i32)]]))
        }
        "rekenserver.sweep" => {
            // The procedure's bounds and error numbers (50110-50113), checked before use.
            let mut n = |name: &str, default: i64, number: i32| match arg(name).ok() {
                None | Some(Sql::Null) => Ok(default),
                Some(v) => match as_i64(v)? {
                    x if x >= 1 => Ok(x),
                    _ => Err(Failure { number, class: 16, message: format!("{name} must be 1 or more") }),
                },
            };
            let opts = crate::handoff::sweep::Options {
                fuse: n("@fuse", 500, 50110)?,
                batch: n("@batch", 100, 50111)? as usize,
                retention_days: int32(Sql::BigInt(n("@retention_days", 60, 50112)?), "@retention_days")?,
                delete_batch: n("@delete_batch", 5000, 50113)?,
                evidence_retention_months: match n("@evidence_retention_months", 84, 50115)? {
                    m @ 1..=1200 => m as i32,
                    _ => {
                        return Err(Failure {
                            number: 50115,
                            class: 16,
                            message: "@evidence_retention_months must be 1 to 1200".into(),
                        });
                    }
                },
            };
            let outcome = crate::handoff::sweep::run(s.client_mut(), opts).await.map_err(|e| Failure {
                number: 50114,
                class: 16,
                message: e.to_string(),
            })?;
            let row = match outcome {
                crate::handoff::sweep::Outcome::Skipped => {
                    vec![
                        Sql::Bit(true),
                        Sql::Int(0),
                        Sql::Int(0),
                        Sql::Int(0),
                        Sql::Int(0),
                        Sql::Bit(false),
                        Sql::Int(0),
                        Sql::Int(0),
                        Sql::Int(0),
                        Sql::Int(0),
                    ]
                }
                crate::handoff::sweep::Outcome::Ran {
                    lost,
                    candidates,
                    sent,
                    repaired,
                    fuse_reached,
                    deleted_log_rows,
                    deleted_dead_letters,
                    deleted_evidence,
                    deleted_requests,
                    ..
                } => vec![
                    Sql::Bit(false),
                    Sql::Int(lost as i32),
                    Sql::Int(candidates as i32),
                    Sql::Int(sent as i32),
                    Sql::Int(repaired as i32),
                    Sql::Bit(fuse_reached),
                    Sql::Int(deleted_log_rows as i32),
                    Sql::Int(deleted_dead_letters as i32),
                    Sql::Int(deleted_evidence as i32),
                    Sql::Int(deleted_requests as i32),
                ],
            };
            let cols = [
                ("skipped", ColType::Bit),
                ("lost", ColType::Int),
                ("candidates", ColType::Int),
                ("sent", ColType::Int),
                ("repaired", ColType::Int),
                ("fuse_reached", ColType::Bit),
                ("deleted_log_rows", ColType::Int),
                ("deleted_dead_letters", ColType::Int),
                ("deleted_evidence", ColType::Int),
                ("deleted_requests", ColType::Int),
            ];
            Ok(result_set(t, &cols, &[row]))
        }
        // Recompute (04_roster.sql, 05_handoff.sql): the PostgreSQL recompute's own steps.
        "rekenserver.herberekening_begin" => {
            use crate::handoff::recompute::Backend;
            let run = s.client_mut().begin().await.map_err(Failure::from)?;
            Ok(result_set(t, &[("run_id", ColType::BigInt)], &[vec![run.map_or(Sql::Null, Sql::BigInt)]]))
        }
        "rekenserver.herberekening_einde" => {
            use crate::handoff::recompute::Backend;
            let run = as_i64(arg("@run")?)?;
            let keys = as_i64(arg("@kandidaten")?)?;
            let sent = as_i64(arg("@verzonden")?)?;
            let text = match arg("@fout").ok() {
                None => None,
                Some(v) => optional_text(v)?,
            };
            s.client_mut().end(run, keys, sent, text).await.map_err(Failure::from)?;
            Ok(None)
        }
        "rekenserver.herberekening_voortgang" => {
            use crate::handoff::recompute::Backend;
            let run = as_i64(arg("@run")?)?;
            let keys = as_i64(arg("@kandidaten")?)?;
            let sent = as_i64(arg("@verzonden")?)?;
            s.client_mut().progress(run, keys, sent).await.map_err(Failure::from)?;
            Ok(None)
        }
        // The web page's runs (05_handoff.sql): the PostgreSQL functions.
        "rekenserver.runs" => {
            let limit = int32(arg("@limit")?, "@limit")?;
            let rows = s.client().query(handoff::RUNS.sql, &[&limit]).await.map_err(pg)?;
            let text = |v: Option<String>| v.map_or(Sql::Null, Sql::NVarChar);
            let int = |v: Option<i32>| v.map_or(Sql::Null, Sql::Int);
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    vec![
                        Sql::BigInt(r.get(0)),
                        Sql::NVarChar(r.get(1)),
                        Sql::NVarChar(r.get(2)),
                        text(r.get(3)),
                        int(r.get(4)),
                        int(r.get(5)),
                        int(r.get(6)),
                        int(r.get(7)),
                        text(r.get(8)),
                    ]
                })
                .collect();
            let cols = [
                ("id", ColType::BigInt),
                ("stap", ColType::NVarChar),
                ("start", ColType::NVarChar),
                ("eind", ColType::NVarChar),
                ("ms", ColType::Int),
                ("kandidaten", ColType::Int),
                ("verzonden", ColType::Int),
                ("verwijderd", ColType::Int),
                ("fout", ColType::NVarChar),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "rekenserver.export_batches" => {
            let limit = int32(arg("@limit")?, "@limit")?;
            let rows = s.client().query(handoff::EXPORT_BATCHES.sql, &[&limit]).await.map_err(pg)?;
            let mut out = Vec::new();
            for r in &rows {
                let batch: String = r.get(0);
                let batch = batch.parse::<Uuid>().map_err(|e| fail(format!("export batch: {e}")))?;
                out.push(vec![
                    Sql::Guid(batch),
                    Sql::Int(r.get(1)),
                    r.get::<_, Option<String>>(2).map_or(Sql::Null, Sql::NVarChar),
                    Sql::BigInt(r.get(3)),
                    Sql::BigInt(r.get(4)),
                ]);
            }
            let cols = [
                ("export_batch", ColType::Guid),
                ("periode_id", ColType::Int),
                ("claimed_at", ColType::NVarChar),
                ("results", ColType::BigInt),
                ("confirmed", ColType::BigInt),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "rekenserver.herbereken_sleutels" => {
            use crate::handoff::recompute::{Backend, Selection};
            let mut opt = |n: &str| a.remove(n).filter(|v| !matches!(v, Sql::Null));
            let int = |v: Option<Sql>, n: &str| v.map(|v| int32(v, n)).transpose();
            let periodes = opt("@periodes").map(as_text).transpose()?;
            let cao = opt("@cao").map(as_text).transpose()?;
            let dv_van = int(opt("@dv_van"), "@dv_van")?;
            let dv_tot = int(opt("@dv_tot"), "@dv_tot")?;
            let na_dv = int(opt("@na_dv"), "@na_dv")?;
            let na_periode = int(opt("@na_periode"), "@na_periode")?;
            let aantal = int(opt("@aantal"), "@aantal")?.ok_or_else(|| fail("@aantal is missing"))?;
            let sleutels = opt("@sleutels").map(as_text).transpose()?;
            let sel = Selection {
                periodes: periodes.map(|p| json_of::<Vec<i32>>(&p, "@periodes")).transpose()?.unwrap_or_default(),
                cao,
                dienstverband_from: dv_van,
                dienstverband_to: dv_tot,
                keys: sleutels.map(|k| keys_of_json(&k)).transpose()?.unwrap_or_default(),
                after: None,
            };
            let after = na_dv.zip(na_periode);
            let keys = s.client_mut().page(&sel, after, i64::from(aantal)).await.map_err(Failure::from)?;
            let rows: Vec<Vec<Sql>> = keys.into_iter().map(|(dv, p)| vec![Sql::Int(dv), Sql::Int(p)]).collect();
            Ok(result_set(t, &[("dienstverband_id", ColType::Int), ("periode_id", ColType::Int)], &rows))
        }
        "rekenserver.herbereken" => {
            // In the caller's transaction, as the procedure runs.
            let keys = keys_of_json(&as_text(arg("@sleutels")?)?)?;
            let (dvs, ps): (Vec<i32>, Vec<i32>) = keys.into_iter().unzip();
            let n: i32 = s.client().query_one(handoff::RECOMPUTE_BATCH.sql, &[&dvs, &ps]).await.map_err(pg)?.get(0);
            Ok(result_set(t, &[("verzonden", ColType::Int)], &[vec![Sql::Int(n)]]))
        }
        // The web page's keys (04_roster.sql): the PostgreSQL functions.
        "rekenserver.sleutels_zoek" => {
            let mut given = |n: &str| arg(n).unwrap_or(Sql::Null);
            let int = |v: Sql, n: &str| match v {
                Sql::Null => Ok(None),
                v => int32(v, n).map(Some),
            };
            let dv = int(given("@dv"), "@dv")?;
            let periode = int(given("@periode"), "@periode")?;
            let cao = optional_text(given("@cao"))?;
            let staat = optional_text(given("@staat"))?;
            let reden = optional_text(given("@reden"))?;
            let na_dv = int(given("@na_dv"), "@na_dv")?;
            let na_periode = int(given("@na_periode"), "@na_periode")?;
            let aantal = int(given("@aantal"), "@aantal")?.unwrap_or(50);
            let rows = s
                .client()
                .query(handoff::KEY_SEARCH.sql, &[&dv, &periode, &cao, &staat, &reden, &na_dv, &na_periode, &aantal])
                .await
                .map_err(pg)?;
            let text = |v: Option<String>| v.map_or(Sql::Null, Sql::NVarChar);
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    vec![
                        Sql::Int(r.get(0)),
                        Sql::Int(r.get(1)),
                        text(r.get(2)),
                        Sql::BigInt(r.get(3)),
                        Sql::NVarChar(r.get(4)),
                        r.get::<_, Option<i64>>(5).map_or(Sql::Null, Sql::BigInt),
                        text(r.get(6)),
                        r.get::<_, Option<i32>>(7).map_or(Sql::Null, Sql::Int),
                        text(r.get(8)),
                    ]
                })
                .collect();
            let cols = [
                ("dienstverband_id", ColType::Int),
                ("periode_id", ColType::Int),
                ("cao", ColType::NVarChar),
                ("versie", ColType::BigInt),
                ("gewijzigd_op", ColType::NVarChar),
                ("opgeslagen_versie", ColType::BigInt),
                ("opgeslagen_op", ColType::NVarChar),
                ("export_status", ColType::Int),
                ("fout", ColType::NVarCharMax),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "rekenserver.sleutel_tijdlijn" => {
            let dv = int32(arg("@dv")?, "@dv")?;
            let periode = int32(arg("@periode")?, "@periode")?;
            let rows = s.client().query(handoff::KEY_TIMELINE.sql, &[&dv, &periode]).await.map_err(pg)?;
            let text = |v: Option<String>| v.map_or(Sql::Null, Sql::NVarChar);
            let out: Vec<Vec<Sql>> = rows
                .iter()
                .map(|r| {
                    vec![Sql::BigInt(r.get(0)), Sql::NVarChar(r.get(1)), text(r.get(2)), text(r.get(3)), text(r.get(4))]
                })
                .collect();
            let cols = [
                ("versie", ColType::BigInt),
                ("verzonden_op", ColType::NVarChar),
                ("beantwoord_op", ColType::NVarChar),
                ("uitkomst", ColType::NVarChar),
                ("foutmelding", ColType::NVarCharMax),
            ];
            Ok(result_set(t, &cols, &out))
        }
        "rekenserver.bewijs" => {
            let dv = int32(arg("@dv")?, "@dv")?;
            let periode = int32(arg("@periode")?, "@periode")?;
            let versions = crate::handoff::evidence::versions(s.client(), dv, periode).await.map_err(pg)?;
            let text = |v: Option<String>| v.map_or(Sql::Null, Sql::NVarChar);
            let rows: Vec<Vec<Sql>> = versions
                .into_iter()
                .map(|v| {
                    // The factors as the procedure writes them (FOR JSON PATH).
                    let factoren = serde_json::Value::Array(
                        v.factoren.iter().map(|(c, w)| serde_json::json!({ "c": c, "w": w.to_string() })).collect(),
                    );
                    vec![
                        Sql::BigInt(v.versie),
                        Sql::NVarChar(v.opgeslagen_op),
                        text(v.vraag),
                        Sql::NVarChar(factoren.to_string()),
                        text(v.rekenversie),
                        text(v.geexporteerd_op),
                    ]
                })
                .collect();
            let cols = [
                ("versie", ColType::BigInt),
                ("opgeslagen_op", ColType::NVarChar),
                ("vraag", ColType::NVarCharMax),
                ("factoren", ColType::NVarCharMax),
                ("rekenversie", ColType::NVarChar),
                ("geexporteerd_op", ColType::NVarChar),
            ];
            Ok(result_set(t, &cols, &rows))
        }
        "rekenserver.noteer_fout" => {
            let handle = as_uuid(arg("@handle")?)?;
            // A caller of an older release passes no @herstelbaar: read from the text,
            // as the procedure does (broker/mssql/03_results.sql).
            let text = as_text(arg("@melding")?)?;
            let repairable = match arg("@herstelbaar").ok() {
                Some(Sql::Bit(b)) => b,
                Some(Sql::Int(i)) => i != 0,
                _ => text.starts_with("internal (") || text.starts_with("error "),
            };
            // @eerste: a Fout, which answers the oldest request open on the dialog.
            let first = optional_bit(arg("@eerste").ok())?;
            if first {
                s.record_request_fout(handle, &text, repairable).await?;
            } else {
                s.record_fout(handle, &text, repairable).await?;
            }
            Ok(None)
        }
        // `sbworker selftest --mssql`'s scratch key (broker/mssql/05_handoff.sql), as the
        // PostgreSQL selftest's functions keep it: each step in transactions of its own.
        "rekenserver.selftest" => {
            let stap = as_text(arg("@stap")?)?;
            let c = s.client();
            match stap.as_str() {
                "begin" | "einde" => {
                    c.execute(selftest::CLEANUP_ROSTER.sql, &[]).await.map_err(pg)?;
                    c.execute(selftest::CLEANUP_BOOKS.sql, &[]).await.map_err(pg)?;
                    if stap == "begin" {
                        c.execute(selftest::SCRATCH.sql, &[]).await.map_err(pg)?;
                    }
                    Ok(None)
                }
                "wijzig" => {
                    c.execute(selftest::SCRATCH_CHANGE.sql, &[]).await.map_err(pg)?;
                    Ok(None)
                }
                "verlies" => {
                    let target: Option<Uuid> = c.query_one(selftest::SCRATCH_LOSE.sql, &[]).await.map_err(pg)?.get(0);
                    let v = target.map_or(Sql::Null, Sql::Guid);
                    Ok(result_set(t, &[("target_handle", ColType::Guid)], &[vec![v]]))
                }
                "werkers" => {
                    let n: i64 = c.query_one(selftest::LIVE_WORKERS.sql, &[]).await.map_err(pg)?.get(0);
                    let n = Sql::Int(i32::try_from(n).unwrap_or(i32::MAX));
                    Ok(result_set(t, &[("levend", ColType::Int)], &[vec![n]]))
                }
                "dialogen" => {
                    let rows = c.query(selftest::SCRATCH_DIALOGS.sql, &[]).await.map_err(pg)?;
                    let rows: Vec<Vec<Sql>> = rows
                        .iter()
                        .map(|r| {
                            vec![
                                r.get::<_, Option<Uuid>>(0).map_or(Sql::Null, Sql::Guid),
                                r.get::<_, Option<Uuid>>(1).map_or(Sql::Null, Sql::Guid),
                                Sql::BigInt(r.get(2)),
                            ]
                        })
                        .collect();
                    let cols = [
                        ("dialog_handle", ColType::Guid),
                        ("target_handle", ColType::Guid),
                        ("versie", ColType::BigInt),
                    ];
                    Ok(result_set(t, &cols, &rows))
                }
                "resultaat" | "export" => {
                    let row = c.query_opt(selftest::SCRATCH_RESULT.sql, &[]).await.map_err(pg)?;
                    let count =
                        |i: usize| row.as_ref().map_or(0, |r| i32::try_from(r.get::<_, i64>(i)).unwrap_or(i32::MAX));
                    if stap == "export" {
                        return Ok(result_set(t, &[("exporteerbaar", ColType::Int)], &[vec![Sql::Int(count(2))]]));
                    }
                    let rows: Vec<Vec<Sql>> =
                        row.iter().map(|r| vec![Sql::BigInt(r.get(0)), Sql::Int(count(1))]).collect();
                    Ok(result_set(t, &[("versie", ColType::BigInt), ("factoren", ColType::Int)], &rows))
                }
                _ => Err(Failure {
                    number: 50120,
                    class: 16,
                    message: "@stap must be begin, dialogen, resultaat, export, einde, wijzig, verlies or werkers"
                        .into(),
                }),
            }
        }
        "rekenserver.dialoog_stil" => {
            let handle = as_uuid(arg("@handle")?)?;
            let idle = s.dialog_idle(handle).await?;
            Ok(result_set(t, &[("stil", ColType::Bit)], &[vec![Sql::Bit(idle)]]))
        }
        other => Err(Failure {
            number: 2812,
            class: 16,
            message: format!(
                "Could not find stored procedure '{other}' (the emulator runs sbworker's procedures only)."
            ),
        }),
    }
}

use crate::sql::statements::postgres_handoff as handoff;
use crate::sql::statements::postgres_operations as ops;
use crate::sql::statements::postgres_selftest as selftest;

fn pg(e: tokio_postgres::Error) -> Failure {
    Failure::from(crate::broker::postgres::error_of(e))
}

fn int32(v: Sql, name: &str) -> Result<i32, Failure> {
    i32::try_from(as_i64(v)?).map_err(|_| fail(format!("{name} out of range")))
}

fn json_of<T: serde::de::DeserializeOwned>(text: &str, name: &str) -> Result<T, Failure> {
    serde_json::from_str(text).map_err(|e| fail(format!("{name} is not the JSON it should be: {e}")))
}

/// Keys as the recompute's procedures take them: `[{"dv": 1001, "p": 202604}, …]`.
fn keys_of_json(text: &str) -> Result<Vec<(i32, i32)>, Failure> {
    #[derive(serde::Deserialize)]
    struct Key {
        dv: i32,
        p: i32,
    }
    Ok(json_of::<Vec<Key>>(text, "@sleutels")?.into_iter().map(|k| (k.dv, k.p)).collect())
}

/// A bit parameter that may be left out (or NULL): false then; a number other than 0 is true.
fn optional_bit(v: Option<Sql>) -> Result<bool, Failure> {
    Ok(match v {
        None | Some(Sql::Null) => false,
        Some(Sql::Bit(b)) => b,
        Some(v) => as_i64(v)? != 0,
    })
}

/// The filter of the dead-letter procedures: `@queue`, `@reason`, `@replayed`, `@upto`,
/// `@id` (each NULL or left out: any).
type LetterArgs = (Option<String>, Option<String>, Option<bool>, Option<i64>, Option<i64>);

fn letter_filter(arg: &mut impl FnMut(&str) -> Result<Sql, Failure>) -> Result<LetterArgs, Failure> {
    let mut given = |n: &str| arg(n).unwrap_or(Sql::Null);
    let queue = optional_text(given("@queue"))?;
    let reason = optional_text(given("@reason"))?;
    let replayed = match given("@replayed") {
        Sql::Null => None,
        Sql::Bit(b) => Some(b),
        v => Some(as_i64(v)? != 0),
    };
    let mut number = |n: &str| match given(n) {
        Sql::Null => Ok(None),
        v => as_i64(v).map(Some),
    };
    let upto = number("@upto")?;
    let id = number("@id")?;
    Ok((queue, reason, replayed, upto, id))
}

fn optional_text(v: Sql) -> Result<Option<String>, Failure> {
    match v {
        Sql::Null => Ok(None),
        v => as_text(v).map(Some),
    }
}

/// Dead letters as sbworker.dead_letters returns them on SQL Server (times as ISO text).
fn letters(t: &mut Tokens, rows: &[tokio_postgres::Row]) -> Option<u64> {
    let text = |v: Option<String>| v.map_or(Sql::Null, Sql::NVarChar);
    let out: Vec<Vec<Sql>> = rows
        .iter()
        .map(|r| {
            vec![
                Sql::BigInt(r.get(0)),
                Sql::NVarChar(r.get(1)),
                Sql::NVarChar(r.get(2)),
                text(r.get(3)),
                Sql::NVarChar(r.get(4)),
                r.get::<_, Option<Vec<u8>>>(5).map_or(Sql::Null, Sql::VarBinary),
                Sql::Int(r.get(6)),
                Sql::NVarChar(r.get(7)),
                Sql::NVarChar(r.get(8)),
                Sql::Int(r.get(9)),
                text(r.get(10)),
                text(r.get(11)),
                r.get::<_, Option<Uuid>>(12).map_or(Sql::Null, Sql::Guid),
            ]
        })
        .collect();
    let cols = [
        ("id", ColType::BigInt),
        ("queue", ColType::NVarChar),
        ("service_name", ColType::NVarChar),
        ("far_service", ColType::NVarChar),
        ("message_type_name", ColType::NVarChar),
        ("message_body", ColType::VarBinaryMax),
        ("attempts", ColType::Int),
        ("reason", ColType::NVarChar),
        ("dead_lettered_at", ColType::NVarChar),
        ("replays", ColType::Int),
        ("replayed_at", ColType::NVarChar),
        ("replayed_by", ColType::NVarChar),
        ("replay_handle", ColType::Guid),
    ];
    result_set(t, &cols, &out)
}

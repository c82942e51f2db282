//! The dialog loop both handlers share. For each message of a received group, in order
//! (except that an Error waits for the later messages of its own dialog:
//! `handling_order`), it does what Service Broker's rules say whatever the contract: a message of a
//! conversation this transaction has already ended is dropped; an EndDialog ends our
//! side; an Error is logged, handed to the handler to record, and ends our side; a
//! dialog timer is handed to the handler, which may end the conversation (the collector
//! does on a reused dialog gone idle); a message type outside the contract is handed to
//! the handler to record and ends the conversation with [`CONTRACT_BREACH`]. Only the
//! contract's own message types reach the handler's [`Dialog::on_message`], with what
//! the loop knows of the batch. The loop counts what each message came to ([`Handled`]).

use std::collections::{HashMap, HashSet};
use std::future::Future;

use tracing::{Instrument, debug, info_span, warn};
use uuid::Uuid;

use crate::transport::system::{self, CONTRACT_BREACH};
use crate::transport::{Message, PayrollStore};
use crate::worker::handler::{Handled, HandlerError};

/// One message of the contract, with what the loop knows of its batch.
#[derive(Debug, Clone, Copy)]
pub struct Incoming<'a> {
    pub message: &'a Message,
    /// The other side has ended this conversation (its EndDialog or Error is in this
    /// batch): nothing can be sent on it any more.
    pub closing: bool,
    /// No later message of this conversation in the batch is of the contract's types:
    /// our side may end once this one is handled.
    pub last: bool,
}

impl Incoming<'_> {
    pub fn handle(&self) -> Uuid {
        self.message.conversation_handle
    }
}

/// What one message of the contract came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A request answered (an Antwoord sent, or a result stored).
    Answered,
    /// Answered as superseded, or an answer older than the stored result.
    Superseded,
    /// A Fout: a bad request, or an answer that could not be stored.
    Faulted,
    /// Nothing to do.
    Skipped,
}

/// Where the conversation stands after a message of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// Still open.
    Open,
    /// Our side ended it without an error (counted as ended).
    Ended,
    /// Our side ended it with an error (the Fout is the count).
    WithError,
}

/// A message of the contract handled: its outcome and the conversation's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    pub outcome: Outcome,
    pub end: End,
}

impl Step {
    pub const fn new(outcome: Outcome, end: End) -> Self {
        Self { outcome, end }
    }
}

/// One side of the payroll contract: the message types it receives, and what it does
/// with each and records for an Error or a breach of the contract.
pub trait Dialog<S: PayrollStore>: Sync {
    /// The contract's message types this side receives.
    const RECEIVES: &'static [&'static str];

    /// One message of those types.
    fn on_message(&self, s: &mut S, m: Incoming<'_>) -> impl Future<Output = Result<Step, HandlerError>> + Send;

    /// The other side ended the conversation with an error (logged already): what to
    /// record before our side ends too. Nothing by default.
    fn on_error(
        &self,
        s: &mut S,
        handle: Uuid,
        code: i32,
        text: &str,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (s, handle, code, text);
        async { Ok(()) }
    }

    /// A message type outside the contract arrived (logged already; `text` says which):
    /// what to record before the conversation is ended with an error. Nothing by default.
    fn on_breach(&self, s: &mut S, handle: Uuid, text: &str) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (s, handle, text);
        async { Ok(()) }
    }

    /// This side's conversation timer fired on a dialog of `contract`: true to end the
    /// conversation (without an error), false to leave it. Left by default.
    fn on_timer(
        &self,
        s: &mut S,
        handle: Uuid,
        contract: &str,
    ) -> impl Future<Output = Result<bool, HandlerError>> + Send {
        let _ = (s, handle, contract);
        async { Ok(false) }
    }
}

/// Runs `d` over the messages of one received group, in order (an Error after the later
/// messages of its dialog: `handling_order`), inside the caller's transaction.
pub async fn run<S: PayrollStore, D: Dialog<S>>(
    d: &D,
    s: &mut S,
    messages: &[Message],
) -> Result<Handled, HandlerError> {
    let mut done = Handled::default();
    // Conversations this transaction has ended: their later messages are moot.
    let mut ended: HashSet<Uuid> = HashSet::new();
    let closing: HashSet<Uuid> = messages
        .iter()
        .filter(|m| m.message_type == system::END_DIALOG || m.message_type == system::ERROR)
        .map(|m| m.conversation_handle)
        .collect();
    // The last message of the contract's types of each conversation in this batch.
    let last: HashMap<Uuid, usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| D::RECEIVES.contains(&m.message_type.as_str()))
        .map(|(i, m)| (m.conversation_handle, i))
        .collect();
    for i in handling_order(messages, &last) {
        let m = &messages[i];
        let h = m.conversation_handle;
        let span = info_span!("message", conversation = %h, seq = m.sequence, message_type = %m.message_type);
        async {
            if ended.contains(&h) {
                debug!("conversation already ended in this transaction; message dropped");
                done.skipped += 1;
                return Ok(());
            }
            let kind = m.message_type.as_str();
            if D::RECEIVES.contains(&kind) {
                let incoming = Incoming { message: m, closing: closing.contains(&h), last: last.get(&h) == Some(&i) };
                let step = d.on_message(s, incoming).await?;
                match step.outcome {
                    Outcome::Answered => done.answered += 1,
                    Outcome::Superseded => done.superseded += 1,
                    Outcome::Faulted => done.faulted += 1,
                    Outcome::Skipped => done.skipped += 1,
                }
                match step.end {
                    End::Open => {}
                    End::Ended => {
                        ended.insert(h);
                        done.ended += 1;
                    }
                    End::WithError => {
                        ended.insert(h);
                    }
                }
                return Ok(());
            }
            match kind {
                system::END_DIALOG => {
                    s.end_conversation(h, None).await?;
                    done.ended += 1;
                }
                system::ERROR => {
                    let (code, text) = system::error_body(&m.body);
                    warn!(code, description = %text, "the other side ended the conversation with an error");
                    d.on_error(s, h, code, &text).await?;
                    s.end_conversation(h, None).await?;
                    done.ended += 1;
                }
                system::DIALOG_TIMER => {
                    if !d.on_timer(s, h, &m.contract).await? {
                        debug!("dialog timer: the conversation stays open");
                        done.skipped += 1;
                        return Ok(());
                    }
                    debug!("dialog timer: the conversation is ended");
                    s.end_conversation(h, None).await?;
                    done.ended += 1;
                }
                other => {
                    warn!(message_type = other, "message type outside the contract; conversation ended with an error");
                    let text = format!("message type {other} is not part of the calculation contract");
                    d.on_breach(s, h, &text).await?;
                    s.end_conversation(h, Some((CONTRACT_BREACH, &text))).await?;
                    done.faulted += 1;
                }
            }
            ended.insert(h);
            Ok::<(), HandlerError>(())
        }
        .instrument(span)
        .await?;
    }
    Ok(done)
}

/// The order the loop handles a batch in: the batch's own, except that an Error goes
/// after the later messages of the contract's types of its conversation (`last`: the
/// last such message of each). Service Broker returns a dialog's Error before the
/// dialog's other messages, whatever order they were sent in, and they can still be
/// received after it ("Broker System Messages"): the Fout that the calculation sends
/// just before it ends the dialog with that Fout's error comes after the Error. Handled
/// first, the Error would end our side, which drops the Fout, and the request would be
/// recorded as the environment's failure (the sweep sends it again) instead of the
/// request's own.
fn handling_order(messages: &[Message], last: &HashMap<Uuid, usize>) -> Vec<usize> {
    let mut order = Vec::with_capacity(messages.len());
    let mut deferred: HashMap<Uuid, Vec<usize>> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let h = m.conversation_handle;
        if m.message_type == system::ERROR && last.get(&h).is_some_and(|&l| l > i) {
            deferred.entry(h).or_default().push(i);
            continue;
        }
        order.push(i);
        if last.get(&h) == Some(&i) {
            order.extend(deferred.remove(&h).unwrap_or_default());
        }
    }
    order
}

#[cfg(test)]
mod tests {
    //! The loop against a session that records what it is asked, no database: the
    //! calculation and the collector as they run, and what each system message does.

    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::contract::{Antwoord, message_types};
    use crate::handlers::calculation::Calculation;
    use crate::handlers::collector::Collector;
    use crate::transport::{
        Attempt, BrokerError, DeadLetter, Fault, Heartbeat, MessageKey, QueueState, Session, Stored,
    };

    /// A session that records the calls the handlers make; the reader's calls are not
    /// the loop's and fail the test.
    #[derive(Default)]
    struct Recorder {
        calls: Vec<String>,
        /// What `claim_version` answers (false: a newer version was answered).
        claim: bool,
    }

    async fn reader_only<T>() -> Result<T, BrokerError> {
        panic!("the dialog loop made a call of the reader's")
    }

    impl Session for Recorder {
        fn begin(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn commit(&mut self) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn rollback(&mut self) -> impl Future<Output = Result<bool, BrokerError>> + Send {
            reader_only()
        }
        fn receive(
            &mut self,
            _: &str,
            _: i32,
            _: Option<Uuid>,
            _: Duration,
        ) -> impl Future<Output = Result<Vec<Message>, BrokerError>> + Send {
            reader_only()
        }
        fn receive_conversation(
            &mut self,
            _: &str,
            _: Uuid,
        ) -> impl Future<Output = Result<Vec<Message>, BrokerError>> + Send {
            reader_only()
        }
        fn send(&mut self, h: Uuid, t: &str, _: Option<&[u8]>) -> impl Future<Output = Result<(), BrokerError>> + Send {
            self.calls.push(format!("send {} {}", short(h), t.rsplit('/').next().unwrap()));
            async { Ok(()) }
        }
        fn end_conversation(
            &mut self,
            h: Uuid,
            error: Option<(i32, &str)>,
        ) -> impl Future<Output = Result<(), BrokerError>> + Send {
            let with = error.map(|(code, _)| format!(" with error {code}")).unwrap_or_default();
            self.calls.push(format!("end {}{with}", short(h)));
            async { Ok(()) }
        }
        fn move_conversation(&mut self, _: Uuid, _: Uuid) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn get_conversation_group(
            &mut self,
            _: &str,
            _: Duration,
        ) -> impl Future<Output = Result<Option<Uuid>, BrokerError>> + Send {
            reader_only()
        }
        fn count_attempts(
            &mut self,
            _: &str,
            _: &[MessageKey],
        ) -> impl Future<Output = Result<Vec<Attempt>, BrokerError>> + Send {
            reader_only()
        }
        fn note_failure(
            &mut self,
            _: &[MessageKey],
            _: &str,
            _: Fault,
        ) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn forget_attempts(&mut self, _: &[MessageKey]) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn dead_letter(&mut self, _: DeadLetter<'_>) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn queue_state(&mut self, _: &str) -> impl Future<Output = Result<QueueState, BrokerError>> + Send {
            reader_only()
        }
        fn take_reader_slot(
            &mut self,
            _: &str,
            _: u32,
        ) -> impl Future<Output = Result<Option<u32>, BrokerError>> + Send {
            reader_only()
        }
        fn free_reader_slot(&mut self, _: &str, _: u32) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn heartbeat(&mut self, _: &Heartbeat) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
        fn heartbeat_end(&mut self, _: Uuid) -> impl Future<Output = Result<(), BrokerError>> + Send {
            reader_only()
        }
    }

    impl PayrollStore for Recorder {
        fn claim_version(
            &mut self,
            dv: i32,
            _: i32,
            versie: i64,
        ) -> impl Future<Output = Result<bool, BrokerError>> + Send {
            self.calls.push(format!("claim {dv} v{versie}"));
            let claim = self.claim;
            async move { Ok(claim) }
        }
        fn store_antwoord(
            &mut self,
            h: Uuid,
            a: &Antwoord,
            superseded: bool,
        ) -> impl Future<Output = Result<Stored, BrokerError>> + Send {
            self.calls.push(format!("store {} v{} superseded={superseded}", short(h), a.versie));
            async { Ok(Stored::Stored) }
        }
        fn record_fout(
            &mut self,
            h: Uuid,
            message: &str,
            repairable: bool,
        ) -> impl Future<Output = Result<(), BrokerError>> + Send {
            let what = message.split(':').next().unwrap_or_default().to_owned();
            self.calls.push(format!("record {} {what} repairable={repairable}", short(h)));
            async { Ok(()) }
        }
    }

    /// Conversation handles the tests can read: 1, 2, 3…
    fn conv(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    fn short(h: Uuid) -> u128 {
        h.as_u128()
    }

    fn msg(h: u128, seq: i64, message_type: &str, body: &[u8]) -> Message {
        Message {
            id: seq,
            conversation_group_id: conv(100),
            conversation_handle: conv(h),
            sequence: seq,
            message_type: message_type.to_owned(),
            body: body.to_vec(),
            service: String::new(),
            contract: String::new(),
        }
    }

    fn vraag() -> Vec<u8> {
        std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/../../schemas/examples/valid/vraag-voorbeeld1.xml"))
            .unwrap()
    }

    fn error(code: i32) -> Vec<u8> {
        format!(
            "<Error xmlns=\"http://schemas.microsoft.com/SQL/ServiceBroker/Error\"><Code>{code}</Code>\
             <Description>gone</Description></Error>"
        )
        .into_bytes()
    }

    fn calculation() -> Calculation {
        Calculation::new(Arc::new(crate::engine::Tables::built_in().unwrap()), crate::contract::Limits::default())
    }

    fn block_on<F: Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(f)
    }

    #[test]
    fn the_calculation_answers_ends_after_the_last_vraag_and_leaves_the_rest_to_the_loop() {
        let mut s = Recorder { claim: true, ..Recorder::default() };
        let batch = [
            msg(1, 0, message_types::VRAAG, &vraag()),
            msg(1, 1, message_types::VRAAG, &vraag()),
            msg(2, 0, message_types::VRAAG, &vraag()),
            msg(2, 1, system::END_DIALOG, b""),
            msg(3, 0, system::DIALOG_TIMER, b""),
            msg(4, 0, "/Other/Type", b"x"),
            msg(4, 1, message_types::VRAAG, &vraag()),
            msg(5, 0, system::ERROR, &error(-8489)),
        ];
        let done = block_on(run(&calculation(), &mut s, &batch)).unwrap();
        assert_eq!(
            s.calls,
            [
                "claim 3062 v1",
                "send 1 Antwoord",
                "claim 3062 v1",
                "send 1 Antwoord",
                "end 1",
                // Conversation 2: its EndDialog is in the batch, so its Vraag is not answered.
                "end 2",
                "end 4 with error 50900",
                "end 5",
            ]
        );
        let want = Handled { answered: 2, faulted: 1, ended: 3, superseded: 0, skipped: 3 };
        assert_eq!(done, want, "{done:?}");
    }

    #[test]
    fn a_superseded_or_bad_vraag_is_answered_so() {
        let mut s = Recorder { claim: false, ..Recorder::default() };
        let batch = [msg(1, 0, message_types::VRAAG, &vraag()), msg(2, 0, message_types::VRAAG, b"<nonsense/>")];
        let done = block_on(run(&calculation(), &mut s, &batch)).unwrap();
        assert_eq!(s.calls[..3], ["claim 3062 v1", "send 1 Antwoord", "end 1"]);
        assert_eq!(s.calls[3], "send 2 Fout");
        assert!(s.calls[4].starts_with("end 2 with error "), "{:?}", s.calls);
        assert_eq!(done, Handled { answered: 0, faulted: 1, ended: 1, superseded: 1, skipped: 0 });
    }

    #[test]
    fn the_collector_records_what_has_no_answer_and_ends_each_dialog() {
        let mut s = Recorder::default();
        let antwoord = calculation().answer(&vraag()).unwrap();
        let batch = [
            msg(1, 0, message_types::ANTWOORD, antwoord.as_bytes()),
            msg(1, 1, system::END_DIALOG, b""),
            msg(2, 0, system::ERROR, &error(-8489)),
            msg(3, 0, message_types::VRAAG, &vraag()),
            msg(4, 0, message_types::ANTWOORD, b"<broken"),
        ];
        let done = block_on(run(&Collector::new(crate::contract::Limits::default()), &mut s, &batch)).unwrap();
        assert_eq!(
            s.calls[..5],
            [
                "store 1 v1 superseded=false",
                "end 1",
                // The EndDialog of conversation 1 is dropped: our side ended it already.
                "record 2 error -8489 repairable=true",
                "end 2",
                "record 3 message type /Rekenserver/LoonfactorBerekening/Vraag is not part of the calculation contract repairable=false",
            ]
        );
        assert_eq!(s.calls[5], "end 3 with error 50900");
        assert_eq!(s.calls[6], "record 4 unreadable Antwoord repairable=false");
        assert!(s.calls[7].starts_with("end 4 with error "), "{:?}", s.calls);
        assert_eq!(done, Handled { answered: 1, faulted: 2, ended: 2, superseded: 0, skipped: 1 });
    }

    use crate::contract::Reden;

    fn fout() -> Vec<u8> {
        let reden = Reden::MissingElement;
        let fout = crate::contract::RekenserverFout {
            error_number: reden.error_number(),
            error_severity: 16,
            error_state: 1,
            error_procedure: "sbworker".to_owned(),
            error_line: 0,
            error_message: "Periode is missing".to_owned(),
            vraag_id: None,
            reden,
        };
        crate::contract::encode_fout(&fout).into_bytes()
    }

    /// SQL Server returns a dialog's Error before its other messages ("Broker System
    /// Messages"): the calculation's Fout, sent just before it ended the dialog with the
    /// Fout's error, comes after the Error. The Fout is still what is recorded (the
    /// request's own fault, not repairable), and the Error after it is moot.
    #[test]
    fn a_fout_received_after_its_error_is_recorded_as_the_fout() {
        let mut s = Recorder::default();
        let antwoord = calculation().answer(&vraag()).unwrap();
        // Conversation 1 is a reused dialog (an Antwoord leaves it open) with an answer
        // and then a Fout behind its Error.
        let reused = |m: Message| Message { contract: crate::contract::SLEUTEL_CONTRACT.to_owned(), ..m };
        let batch = [
            reused(msg(1, 3, system::ERROR, &error(50010))),
            reused(msg(1, 1, message_types::ANTWOORD, antwoord.as_bytes())),
            reused(msg(1, 2, message_types::FOUT, &fout())),
            // An Error with nothing of the contract after it is handled where it is.
            msg(2, 1, system::ERROR, &error(-8489)),
            msg(3, 1, message_types::ANTWOORD, antwoord.as_bytes()),
        ];
        let done = block_on(run(&Collector::new(crate::contract::Limits::default()), &mut s, &batch)).unwrap();
        assert_eq!(
            s.calls,
            [
                "store 1 v1 superseded=false",
                "record 1 missing-element (50010) repairable=false",
                "end 1",
                // Conversation 1's Error is dropped: the Fout ended our side.
                "record 2 error -8489 repairable=true",
                "end 2",
                "store 3 v1 superseded=false",
                "end 3",
            ]
        );
        assert_eq!(done, Handled { answered: 2, faulted: 1, ended: 3, superseded: 0, skipped: 1 });
    }

    #[test]
    fn an_error_waits_for_the_last_message_of_its_conversation_only() {
        let h = |n: u128| msg(n, 0, message_types::VRAAG, b"");
        let e = |n: u128| msg(n, 9, system::ERROR, b"");
        let t = |n: u128| msg(n, 0, system::DIALOG_TIMER, b"");
        let batch = [t(1), e(1), e(2), h(1), h(3), h(1), h(2), e(3)];
        let last = HashMap::from([(conv(1), 5), (conv(2), 6), (conv(3), 4)]);
        assert_eq!(handling_order(&batch, &last), [0, 3, 4, 5, 1, 6, 2, 7]);
        assert_eq!(handling_order(&batch, &HashMap::new()), (0..batch.len()).collect::<Vec<_>>());
    }
}

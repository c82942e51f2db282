//! Dead letters for the tests of `sbworker dead-letter` and the web page: a calculation
//! that fails every request of one dienstverband (so its Vraag is diverted), and a
//! letter planted directly.

use std::sync::Arc;

use sbworker::broker::Message;
use sbworker::contract::Limits;
use sbworker::demo::DATA_QUEUE;
use sbworker::handlers::{calculation, collector};
use sbworker::transport::PayrollStore;
use sbworker::worker::Handlers;
use sbworker::worker::handler::{BoxFuture, Handled, Handler, HandlerError};
use tokio_postgres::Client;

use super::calc::calculation_handler;

/// The calculation, except that every request of one dienstverband fails (also used by
/// the browser tests).
pub struct FailsFor(i32);

impl<S: PayrollStore> Handler<S> for FailsFor {
    fn handle<'a>(&'a self, s: &'a mut S, msgs: &'a [Message]) -> BoxFuture<'a, Result<Handled, HandlerError>> {
        Box::pin(async move {
            let marker = format!("<Dienstverband Id=\"{}\">", self.0);
            if msgs.iter().any(|m| String::from_utf8_lossy(&m.body).contains(&marker)) {
                return Err(HandlerError::Failed(format!("the calculation choked on dienstverband {}", self.0)));
            }
            Handler::<S>::handle(&*calculation_handler(), s, msgs).await
        })
    }

    fn divert_reply(&self, m: &Message, reason: &str) -> Option<(&'static str, Vec<u8>)> {
        Handler::<S>::divert_reply(&*calculation_handler(), m, reason)
    }
}

pub fn handlers<S: PayrollStore>(fails_for: i32) -> Handlers<S> {
    Handlers::default()
        .with(calculation::NAME, Arc::new(FailsFor(fails_for)))
        .with(collector::NAME, Arc::new(collector::Collector::new(Limits::default())))
}

/// Plants a dead letter (an answer set aside on the data side) with `reason`; its id.
pub async fn plant(c: &Client, reason: &str) -> i64 {
    c.query_one(
        "INSERT INTO sbworker.dead_letter (queue, service_name, service_contract_name, conversation_group_id, \
         conversation_handle, message_sequence_number, message_type_name, message_body, attempts, reason) \
         VALUES ($1, '/Rekenserver/LoonfactorBerekening/DataService', '/Rekenserver/LoonfactorBerekening/DataContract', \
         gen_random_uuid(), gen_random_uuid(), 1, '/Rekenserver/LoonfactorBerekening/Antwoord', '\\x3c612f3e', 3, $2) \
         RETURNING id",
        &[&DATA_QUEUE, &reason],
    )
    .await
    .unwrap()
    .get(0)
}

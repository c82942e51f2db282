//! Every parser the emulator runs on bytes from the network, in one function: for the
//! fuzz target (`fuzz/fuzz_targets/tds.rs`) and the random-input test, so both exercise
//! what the server exercises. Errors are expected; a panic is a bug.

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll, Waker};

use super::{codec, tsql};

/// Runs `data` through packet framing, PRELOGIN, LOGIN7, SQL batch, RPC (with every
/// parameter type), transaction-manager requests and the T-SQL recogniser.
pub fn parse_everything(data: &[u8]) {
    // Framing reads from a slice, which is always ready: one poll completes it.
    let mut input = data;
    let framing = pin!(codec::read_message(&mut input));
    let polled = framing.poll(&mut Context::from_waker(Waker::noop()));
    debug_assert!(matches!(polled, Poll::Ready(_)), "reading from a slice never waits");
    let _ = codec::prelogin_encryption(data);
    let _ = codec::parse_login7(data);
    let _ = codec::parse_rpc(data);
    let _ = codec::parse_tm(data);
    if let Ok(text) = codec::parse_sql_batch(data) {
        let _ = tsql::parse_batch(&text);
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = tsql::parse_batch(text);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    proptest! {
        #![proptest_config(ProptestConfig { cases: 3000, ..ProptestConfig::default() })]
        #[test]
        fn random_bytes_never_panic(data in proptest::collection::vec(any::<u8>(), 0..512)) {
            super::parse_everything(&data);
        }

        #[test]
        fn random_t_sql_of_the_statement_words_never_panics(words in proptest::collection::vec(
            proptest::sample::select(vec![
                "WAITFOR", "(", ")", "RECEIVE", "TOP", "*", ",", "FROM", "q", "WHERE", "conversation_handle",
                "=", "@h", "TIMEOUT", "5", "SEND", "ON", "CONVERSATION", "MESSAGE", "TYPE", "[t]", "END",
                "WITH", "ERROR", "DESCRIPTION", "'x'", "CLEANUP", "BEGIN", "DIALOG", "SERVICE", "TO",
                "CONTRACT", "MOVE", "GET", "GROUP", "DECLARE", "SET", "SELECT", "CAST", "AS", "xml",
                "CONVERT", ";", "--", "/*", "*/", "N'", "EXEC", "TRAN", "COMMIT",
            ]),
            0..24,
        )) {
            let _ = crate::emulator::tsql::parse_batch(&words.join(" "));
        }
    }
}

//! The one integration-test binary (one binary links once). Each module is a
//! topic; shared helpers live in `common`, and topics never use each other.
//!
//! The tests named `slow_…` take about half the suite's time; the everyday lane leaves
//! them out: `cargo test -- --skip slow_`. CI runs them all (`cargo test --locked`).

mod bench_quick; // `sbworker bench --quick` as a process (slow)
mod broker_pg; // the PostgreSQL broker's Service Broker semantics
mod broker_pg_races; // races in the PostgreSQL broker
mod cli_calc; // `sbworker calc` as a user runs it
mod cli_run; // `sbworker run` as an operator starts it
mod common; // shared helpers only: cluster, broker, builders, processes, TDS, faults
mod conformance; // the transport conformance suite, on both back ends
mod conformance_handoff; // the hand-off's and operations' conformance scenarios, on both back ends
mod conformance_worker; // the worker-level conformance scenarios, on both back ends
mod contract_examples; // the example messages against xmllint and the codec
mod contract_props; // property tests of the codec
mod doc_links; // every link and cited path in the docs exists
mod emulator_clients; // the SQL Server drivers we did not write, against the emulator
mod emulator_protocol; // the emulator's TDS protocol and T-SQL: login, TLS, errors, the browser, RECEIVE
mod engine_cases; // the engine against the worked examples and edge cases
mod engine_props; // property tests of the engine
mod handoff_mssql; // the payroll hand-off on SQL Server, over TDS against the emulator
mod handoff_pg; // the payroll hand-off and housekeeping on PostgreSQL
mod layers; // the crates' and modules' layers
mod mssql_real; // against a real SQL Server, when one is given
mod mssql_scripts; // the SQL Server scripts, checked without a server (one slow parser test)
mod ops; // `sbworker status` and `sbworker dead-letter`
mod packaging; // the Debian package's pieces agree
mod pg_roles; // the PostgreSQL roles, as strict as Service Broker's permissions
mod pg_tls; // TLS to PostgreSQL as libpq's `sslmode` means it
mod pipeline_pg; // the pipeline on PostgreSQL, end to end (two slow tests)
mod repairs_pg; // lost dialogs and unbuildable keys, repaired by the sweep
mod routes_pg; // the split install on PostgreSQL: sides on servers of their own, joined by routes
mod secrets; // no secret is ever printed
mod selftest; // `sbworker selftest`
mod transient_faults; // aimed transient faults: retried, never counted, never diverted
mod web_browser; // `sbworker web` in a real browser (Chromium through ChromeDriver)
mod work_budget; // the work per request of a fixed pipeline and headline load, against its budget (slow)
mod worker_pg; // the worker runtime in process against the PostgreSQL broker
mod worker_process; // the worker as a real process
mod worker_tds; // the worker runtime over TDS: the pipeline, faults on the wire, idle queues on activation
